import torch

from fgl_workbench.defenses.aggregation_perturbation import (
    APConfig,
    bound_out_degree,
    neighbour_sum,
    perturbed_hops,
)
from fgl_workbench.defenses.metric_dp import normalise


def random_graph(n: int, e: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = ei[:, ei[0] != ei[1]]
    return torch.unique(torch.cat([ei, ei.flip(0)], 1), dim=1)  # undirected, no duplicates


def test_bound_out_degree_keeps_a_subset_within_the_bound():
    ei = random_graph(30, 400, 0)
    kept = bound_out_degree(ei, 4, torch.Generator().manual_seed(1))
    assert int(torch.bincount(kept[0]).max()) <= 4
    original = {tuple(e) for e in ei.t().tolist()}
    assert {tuple(e) for e in kept.t().tolist()} <= original
    assert kept.size(1) == int(torch.bincount(ei[0]).clamp(max=4).sum())  # as many as allowed


def test_edge_sensitivity_is_root_two():
    x = normalise(torch.randn(20, 5))
    ei = random_graph(20, 40, 2)
    for u, v in [(0, 1), (3, 7), (5, 19)]:
        extra = torch.tensor([[u, v], [v, u]])
        with_edge = neighbour_sum(x, torch.cat([ei, extra], 1))
        change = (with_edge - neighbour_sum(x, ei)).norm()
        assert float(change) <= APConfig(level="edge").sensitivity + 1e-6


def test_node_sensitivity_is_root_max_degree():
    d = 5
    cfg = APConfig(level="node", max_degree=d)
    x = normalise(torch.randn(40, 8))
    ei = bound_out_degree(random_graph(40, 300, 3), d, torch.Generator().manual_seed(0))
    for node in range(10):
        without = ei[:, (ei[0] != node) & (ei[1] != node)]
        change = neighbour_sum(x, ei) - neighbour_sum(x, without)
        change[node] = 0  # the node's own row belongs to its own record (DP-SGD protects it)
        assert float(change.norm()) <= cfg.sensitivity + 1e-6


def test_hops_are_unit_rows_and_noise_is_seeded():
    x, ei = torch.randn(30, 6), random_graph(30, 80, 4)
    cfg = APConfig(noise_multiplier=0.5)
    a = perturbed_hops(x, ei, 2, cfg, torch.Generator().manual_seed(0))
    b = perturbed_hops(x, ei, 2, cfg, torch.Generator().manual_seed(0))
    assert len(a) == 3 and all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    norms = torch.cat([h.norm(dim=1) for h in a])
    assert bool(((norms - 1).abs() < 1e-5).all())
    exact = perturbed_hops(x, ei, 2, None, torch.Generator())
    assert not torch.allclose(exact[1], a[1])
