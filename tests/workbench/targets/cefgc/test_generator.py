"""Sampling and training cut padding away: the score of a graph does not depend on how far
its batch is padded, and each synthetic graph keeps its own template's shape."""

import torch
from torch_geometric.data import Data

from fgl_workbench.targets.cefgc.generator import (
    GeneratorConfig,
    blank_generator,
    dense,
    sample_graphs,
    trimmed,
)


def _graphs(sizes: list[int]) -> list[Data]:
    out = []
    for i, n in enumerate(sizes):
        ring = torch.arange(n)
        edges = torch.stack([ring, (ring + 1) % n])
        out.append(
            Data(x=torch.full((n, 3), float(i)), edge_index=torch.cat([edges, edges.flip(0)], 1))
        )
    return out


def test_padding_does_not_change_the_score_of_the_real_pairs():
    torch.manual_seed(0)
    net = blank_generator(GeneratorConfig(), 3).double()
    graphs = _graphs([4, 6, 5])
    adj, x, mask = dense(graphs, 12)
    level = torch.tensor([0, 3, 5])
    padded = net(adj.double(), x.double(), mask, level)
    a, xs, m = trimmed(adj, x, mask)
    assert a.shape == (3, 6, 6)
    torch.testing.assert_close(net(a.double(), xs.double(), m, level), padded[:, :6, :6])
    assert (padded[:, 6:] == 0).all()


def test_each_synthetic_graph_has_its_templates_nodes_in_the_templates_order():
    torch.manual_seed(0)
    cfg = GeneratorConfig(steps=2)
    templates = _graphs([9, 3, 7, 3, 12, 5])
    net = blank_generator(cfg, 3).eval()
    fake = sample_graphs(net, templates, 1, cfg, torch.Generator().manual_seed(0))
    assert [g.num_nodes for g in fake] == [9, 3, 7, 3, 12, 5]
    for g, t in zip(fake, templates, strict=True):
        torch.testing.assert_close(g.x, t.x)
        assert int(g.y) == 1
        assert g.edge_index.numel() == 0 or int(g.edge_index.max()) < t.num_nodes
