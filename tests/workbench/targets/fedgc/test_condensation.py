import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fgl_workbench.targets.fedgc.condensation import (
    EdgeGenerator,
    aggregate_class_gradients,
    class_coefficients,
    class_gradients,
    condensed_labels,
    gradient_distance,
    normalised_dense,
    normalised_sparse,
    random_gcn,
    receptive_field,
)


def test_condensed_labels_follow_gcond_on_coras_public_split():
    counts = np.full(7, 20)  # Cora's public split: 20 training labels per class
    for ratio, per_class in ((0.25, 5), (0.5, 10), (1.0, 20)):
        y = condensed_labels(counts, ratio)
        assert y.size == 140 * ratio
        assert (np.bincount(y) == per_class).all()


def test_condensed_labels_keep_small_classes_and_skip_absent_ones():
    y = condensed_labels(np.array([100, 1, 0, 30]), 0.1)
    sizes = np.bincount(y, minlength=4)
    assert sizes[1] == 1 and sizes[2] == 0 and sizes[3] == 3
    assert sizes.sum() == 13  # ⌊131 · 0.1⌋, the largest class takes the rest
    with pytest.raises(ValueError, match="no class"):
        condensed_labels(np.zeros(3), 0.5)


def test_edge_generator_is_symmetric_with_zero_diagonal_and_learns():
    torch.manual_seed(0)
    x = torch.randn(12, 5)
    adj = EdgeGenerator(5, hidden=16)(x)
    assert torch.allclose(adj, adj.T) and (adj.diagonal() == 0).all()
    assert ((adj >= 0) & (adj < 1)).all()
    adj.sum().backward()  # gradients reach the features through the edge scores
    one_sided = EdgeGenerator(5, hidden=16, symmetric=False)
    adj = one_sided(x)
    assert not torch.allclose(adj, adj.T)
    # the per-node first layer equals the MLP on every concatenated pair [x_i‖x_j]
    i, j = torch.meshgrid(torch.arange(12), torch.arange(12), indexing="ij")
    pairs = torch.cat([x[i.reshape(-1)], x[j.reshape(-1)]], 1)
    naive = torch.sigmoid(one_sided.rest(one_sided.first(pairs)).view(12, 12))
    assert torch.allclose(adj, naive * (1 - torch.eye(12)), atol=1e-6)


def test_sparse_and_dense_normalisation_agree():
    edges = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    dense = torch.zeros(4, 4)
    dense[edges[0], edges[1]] = 1.0
    assert torch.allclose(normalised_sparse(edges, 4).to_dense(), normalised_dense(dense))
    # a path end: degree 2 with its self-loop, its neighbour 3
    assert normalised_dense(dense)[0, 1].item() == pytest.approx(1 / np.sqrt(2 * 3))


def full_graph_logits(params, x, adj):
    """The 2-layer GCN on the whole graph: Â ReLU(Â X W1 + b1) W2 + b2."""
    w1, b1, w2, b2 = params
    return adj @ (torch.relu(adj @ (x @ w1) + b1) @ w2) + b2


def test_class_gradients_are_each_class_losss_gradient_on_either_adjacency():
    """The receptive field (node 5 sits three hops from every labelled node and is left out)
    gives the gradients of the whole-graph GCN."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(7, 4, generator=g), torch.tensor([0, 0, 1, 1, 2, 2, 2])
    edges = torch.tensor([[0, 1, 2, 3, 4, 1, 6], [1, 2, 3, 4, 5, 4, 0]])
    edges = torch.cat([edges, edges.flip(0)], 1)
    dense = torch.zeros(7, 7)
    dense[edges[0], edges[1]] = 1.0
    theta = random_gcn(4, 8, 3, g)
    mask = torch.tensor([True, True, True, False, False, False, True])
    sparse_field = receptive_field(x, normalised_sparse(edges, 7), y, mask)
    dense_field = receptive_field(x, normalised_dense(dense), y, mask)
    assert sparse_field.ax.shape[0] < 7  # node 5 is not in it
    sparse_grads = class_gradients(theta, sparse_field)
    dense_grads = class_gradients(theta, dense_field)
    assert sorted(sparse_grads) == [0, 1, 2]
    w = [p.clone().requires_grad_(True) for p in theta]
    logits = full_graph_logits(w, x, normalised_dense(dense))
    for c, nodes in ((1, [2]), (0, [0, 1])):
        expected = torch.autograd.grad(
            F.cross_entropy(logits[nodes], y[nodes]), w, retain_graph=True
        )
        for a, b, e in zip(sparse_grads[c], dense_grads[c], expected, strict=True):
            assert torch.allclose(a, e, atol=1e-6) and torch.allclose(b, e, atol=1e-6)


def test_aggregation_weighs_by_class_counts_or_equally():
    one = [torch.ones(2)]
    up = [{0: one, 1: [torch.zeros(2)]}, {0: [torch.full((2,), 4.0)]}]
    counts = np.array([[3, 5], [1, 0]])
    by_counts = aggregate_class_gradients(up, counts, "counts")
    assert torch.allclose(by_counts[0][0], torch.full((2,), (3 * 1 + 1 * 4) / 4))
    assert torch.allclose(by_counts[1][0], torch.zeros(2))  # only client 0 holds class 1
    mean = aggregate_class_gradients(up, counts, "mean")
    assert torch.allclose(mean[0][0], torch.full((2,), 2.5))


def test_distances_vanish_on_equal_gradients_and_cosine_ignores_scale():
    g = torch.Generator().manual_seed(2)
    a = random_gcn(5, 4, 3, g)
    b = random_gcn(5, 4, 3, g)
    for metric in ("sse", "cosine"):
        assert gradient_distance(a, a, metric).item() == pytest.approx(0.0, abs=1e-3)
        assert gradient_distance(a, b, metric).item() > 0
    doubled = [2 * p for p in a]
    assert gradient_distance(doubled, a, "cosine").item() == pytest.approx(0.0, abs=1e-3)
    assert gradient_distance(doubled, a, "sse").item() > 0


def test_class_coefficients_scale_by_the_largest_condensed_class():
    assert np.allclose(class_coefficients(np.array([0, 0, 0, 0, 1, 2, 2]), 4), [1, 0.25, 0.5, 0])
