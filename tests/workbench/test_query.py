import numpy as np
import pytest
import torch
from torch_geometric.utils import k_hop_subgraph

from workbench.models import ModelConfig, build_model
from workbench.query import GraphQueryAPI, NodeQueryAPI, khop_batch


@pytest.mark.parametrize("hops", [0, 1, 2])
@pytest.mark.parametrize("arch", ["gcn", "sage", "gat"])
def test_batched_queries_equal_one_subgraph_per_query(small_csbm, hops, arch):
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, hidden=16), small_csbm.num_features, 4, "node")
    model.eval()
    data = small_csbm.data
    ids = np.array([0, 5, 17, 200, 399, 5])
    got = NodeQueryAPI(model, data, chunk=4).logits(ids, hops)
    for row, i in zip(got, ids.tolist(), strict=True):
        subset, ei, mapping, _ = k_hop_subgraph(
            i, hops, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes
        )
        want = model(data.x[subset], ei)[mapping[0]]
        torch.testing.assert_close(row, want, rtol=1e-5, atol=1e-5)


def test_khop_batch_on_a_path():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    nodes, bei, pos = khop_batch(ei, 5, np.array([0, 2, 4]), 1)
    assert nodes.tolist() == [0, 1, 1, 2, 3, 3, 4]
    assert pos.tolist() == [0, 3, 6]
    assert bei.shape[1] == 8


def test_query_rejects_out_of_range_ids(small_csbm):
    model = build_model(ModelConfig(), small_csbm.num_features, 4, "node")
    api = NodeQueryAPI(model, small_csbm.data)
    with pytest.raises(ValueError, match="node_ids"):
        api.logits(np.array([small_csbm.num_items]))
    with pytest.raises(ValueError, match="hops"):
        api.logits(np.array([0]), hops=-1)


def test_graph_query_matches_single_graph_forward(small_graphs):
    model = build_model(ModelConfig(), small_graphs.num_features, 2, "graph")
    model.eval()
    graphs = small_graphs.graphs[:7]
    got = GraphQueryAPI(model, batch_size=3).logits(graphs)
    for row, g in zip(got, graphs, strict=True):
        batch = torch.zeros(g.num_nodes, dtype=torch.long)
        torch.testing.assert_close(row, model(g.x, g.edge_index, batch)[0], rtol=1e-5, atol=1e-5)
