import numpy as np
import torch

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition


def test_node_clients_hold_their_induced_subgraph(cora):
    part = make_partition(cora, "louvain", 5, seed=0)
    fed = build_federation(cora, part)
    for c, p in zip(fed.clients, part.clients, strict=True):
        gid = c.data.global_id.numpy()
        assert np.array_equal(gid, p.ids)
        assert torch.equal(c.data.x, cora.data.x[gid])
        src, dst = gid[c.data.edge_index.numpy()]
        owner = part.owner(cora.num_items)
        assert (owner[src] == p.client_id).all() and (owner[dst] == p.client_id).all()
        assert np.array_equal(gid[c.data.train_mask.numpy()], p.train)
        assert np.array_equal(gid[c.data.test_mask.numpy()], p.test)


def test_graph_clients_hold_their_graphs(small_graphs):
    part = make_partition(small_graphs, "iid", 3, seed=0)
    fed = build_federation(small_graphs, part)
    for c, p in zip(fed.clients, part.clients, strict=True):
        assert c.num_graphs == p.ids.size
        assert c.train[0] is small_graphs.graphs[p.train[0]]
