import numpy as np
import torch

from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.targets.cefedgnn.halo import NO_LABEL, halo_client


def test_a_client_keeps_its_cross_edges_and_sees_no_remote_features():
    ds = csbm(CSBMParams(num_nodes=200, num_classes=3, num_features=8, seed=0))
    part = make_partition(ds, "louvain", 3, 0)
    owner = part.owner(ds.num_items)
    src, dst = ds.data.edge_index
    for p in part.clients:
        c = halo_client(ds, p)
        g = c.data.global_id
        assert torch.equal(g[: c.num_own], torch.from_numpy(p.ids))
        assert (owner[c.halo.numpy()] != p.client_id).all()
        # every global edge touching an own node is here, and no edge between two halo nodes
        touching = (owner[src.numpy()] == p.client_id) | (owner[dst.numpy()] == p.client_id)
        assert c.data.edge_index.shape[1] == int(touching.sum())
        ls, ld = c.data.edge_index
        assert ((ls < c.num_own) | (ld < c.num_own)).all()
        assert (c.data.x[c.num_own :] == 0).all() and (c.data.y[c.num_own :] == NO_LABEL).all()
        assert not (c.data.train_mask[c.num_own :] | c.data.test_mask[c.num_own :]).any()
        assert torch.equal(c.data.x[: c.num_own], ds.data.x[torch.from_numpy(p.ids)])
        boundary = c.data.global_id[c.boundary].numpy()
        neighbours_elsewhere = {
            int(u)
            for u, v in zip(src.numpy(), dst.numpy(), strict=True)
            if owner[u] == p.client_id and owner[v] != p.client_id
        }
        assert set(boundary.tolist()) == neighbours_elsewhere
    assert np.isin(owner, [c.client_id for c in part.clients]).all()


def test_edges_to_the_auxiliary_pool_are_outside_the_federation():
    ds = csbm(CSBMParams(num_nodes=200, num_classes=3, num_features=8, seed=0))
    part = make_partition(ds, "louvain", 3, 0, aux_fraction=0.2)
    owner = part.owner(ds.num_items)
    for p in part.clients:
        c = halo_client(ds, p, owner >= 0)
        assert (owner[c.data.global_id.numpy()] >= 0).all()
        src, dst = ds.data.edge_index.numpy()
        inside = (owner[src] >= 0) & (owner[dst] >= 0)
        touching = (owner[src] == p.client_id) | (owner[dst] == p.client_id)
        assert c.data.edge_index.shape[1] == int((touching & inside).sum())
