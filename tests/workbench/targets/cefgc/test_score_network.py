"""EDP-GNN's score network: a symmetric score, zero on the diagonal and on padding,
equivariant to relabelling the nodes, and conditioned on the noise level."""

import torch

from fgl_workbench.targets.cefgc.score_network import EDPScoreNetwork


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    adj = torch.rand(3, 7, 7, generator=gen)
    adj = (adj + adj.transpose(1, 2)) / 2
    x = torch.randn(3, 7, 5, generator=gen)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False  # a 5-node graph padded to 7
    return adj, x, mask


def test_the_score_is_symmetric_and_zero_where_no_pair_is():
    torch.manual_seed(0)
    net = EDPScoreNetwork(5, levels=6)
    adj, x, mask = _batch()
    s = net(adj, x, mask, torch.tensor([0, 3, 5]))
    assert s.shape == (3, 7, 7)
    torch.testing.assert_close(s, s.transpose(1, 2))
    assert (torch.diagonal(s, dim1=1, dim2=2) == 0).all()
    assert (s[1, 5:] == 0).all() and (s[1, :, 5:] == 0).all()
    assert s[0].abs().sum() > 0


def test_relabelling_the_nodes_relabels_the_score():
    torch.manual_seed(0)
    net = EDPScoreNetwork(5, levels=6).double()
    adj, x, mask = (t.double() if t.is_floating_point() else t for t in _batch())
    level = torch.tensor([1, 2, 4])
    perm = torch.randperm(7)
    s = net(adj, x, mask, level)
    sp = net(adj[:, perm][:, :, perm], x[:, perm], mask[:, perm], level)
    torch.testing.assert_close(sp, s[:, perm][:, :, perm])


def test_the_noise_level_selects_its_own_gains():
    torch.manual_seed(0)
    net = EDPScoreNetwork(5, levels=6)
    adj, x, mask = _batch()
    with torch.no_grad():
        net.score_hidden.gain[2] *= 3.0
    a = net(adj, x, mask, torch.tensor([1, 1, 1]))
    b = net(adj, x, mask, torch.tensor([2, 2, 2]))
    c = net(adj, x, mask, torch.tensor([3, 3, 3]))
    assert not torch.allclose(a, b)
    torch.testing.assert_close(a, c)  # untouched levels still share their initial gains


def test_the_edge_layer_reads_channels_and_both_endpoints_as_one_linear_map():
    """The first layer is split by blocks for speed; it must equal the map of the
    concatenation [channels of (u, v), x_u, x_v] that the architecture defines."""
    torch.manual_seed(0)
    edge = EDPScoreNetwork(5, levels=6).double().edges[1]
    adj = torch.rand(3, 2, 7, 7, dtype=torch.double)
    x = torch.randn(3, 7, 16, dtype=torch.double)
    level = torch.tensor([0, 2, 5])
    ends = torch.cat(
        [x.unsqueeze(2).expand(-1, -1, 7, -1), x.unsqueeze(1).expand(-1, 7, -1, -1)], -1
    )
    first = edge.first(torch.cat([adj.permute(0, 2, 3, 1), ends], -1), level)
    h = torch.nn.functional.elu(edge.second(torch.nn.functional.elu(first), level))
    expected = edge.last(h).permute(0, 3, 1, 2)
    expected = (expected + expected.transpose(-1, -2)) / 2
    pairs = torch.ones(3, 7, 7, dtype=torch.bool)
    torch.testing.assert_close(edge(adj, x, level, pairs), expected)
