import numpy as np
import torch

from fgl_workbench.data.synthetic import CSBMParams, SyntheticGraphsParams, csbm, synthetic_graphs


def test_csbm_is_deterministic_by_seed():
    a, b = csbm(CSBMParams(seed=5)), csbm(CSBMParams(seed=5))
    assert torch.equal(a.data.x, b.data.x) and torch.equal(a.data.edge_index, b.data.edge_index)
    c = csbm(CSBMParams(seed=6))
    assert not torch.equal(a.data.edge_index, c.data.edge_index)


def test_csbm_homophily_and_degree_follow_params():
    for h in (0.2, 0.9):
        ds = csbm(CSBMParams(num_nodes=3000, num_classes=4, homophily=h, avg_degree=8, seed=1))
        src, dst = ds.data.edge_index
        measured = (ds.data.y[src] == ds.data.y[dst]).float().mean().item()
        assert abs(measured - h) < 0.05
        assert abs(src.numel() / 3000 - 8) < 1.0
        assert not (src == dst).any()


def test_csbm_labels_are_balanced():
    ds = csbm(CSBMParams(num_nodes=1000, num_classes=4))
    assert np.bincount(ds.labels).tolist() == [250] * 4


def test_synthetic_graphs_are_deterministic_and_undirected():
    a = synthetic_graphs(SyntheticGraphsParams(num_graphs=30, seed=2))
    b = synthetic_graphs(SyntheticGraphsParams(num_graphs=30, seed=2))
    assert all(
        torch.equal(x.edge_index, y.edge_index) for x, y in zip(a.graphs, b.graphs, strict=True)
    )
    g = a.graphs[0]
    pairs = set(zip(*g.edge_index.tolist(), strict=True))
    assert all((v, u) in pairs for u, v in pairs)
    assert a.num_items == 30 and a.num_classes == 2
