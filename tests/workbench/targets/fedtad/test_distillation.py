"""FedTAD's server pieces: a symmetric pseudo-graph with self-loops, zero divergence when the
teacher is the student, the weighting by reliability, and a generator that learns."""

import numpy as np
import pytest
import torch

from fgl_workbench.targets.fedtad.distillation import (
    ConditionalGenerator,
    divergence_loss,
    diversity_loss,
    knn_graph,
    pseudo_labels,
    semantic_loss,
)


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_pseudo_graph_is_symmetric_with_self_loops(similarity):
    x = torch.randn(20, 8, generator=torch.Generator().manual_seed(0))
    ei = knn_graph(x, k=3, similarity=similarity)
    pairs = set(map(tuple, ei.T.tolist()))
    assert all((j, i) in pairs for i, j in pairs)
    assert all((i, i) in pairs for i in range(20))
    out_degree = np.bincount(ei[0].numpy(), minlength=20)
    assert out_degree.min() >= 3  # k neighbours (self included) before symmetrising


@pytest.mark.parametrize("kind", ["kl", "l1"])
def test_divergence_is_zero_when_the_teacher_is_the_student(kind):
    logits = torch.randn(12, 4, generator=torch.Generator().manual_seed(1))
    labels = torch.arange(12) % 4
    weights = np.full((2, 4), 0.5)
    assert divergence_loss(logits, [logits, logits], labels, weights, kind).item() == pytest.approx(
        0.0, abs=1e-7
    )
    other = logits + 1.0 * torch.randn(12, 4, generator=torch.Generator().manual_seed(2))
    assert divergence_loss(logits, [other, logits], labels, weights, kind).item() > 0


def test_reliability_weights_silence_an_unreliable_teacher():
    labels = torch.tensor([0, 0, 1, 1])
    good = torch.tensor([[5.0, 0.0], [5.0, 0.0], [0.0, 5.0], [0.0, 5.0]])
    bad = -good
    only_good = semantic_loss([good, bad], labels, np.array([[1.0, 1.0], [0.0, 0.0]]))
    both = semantic_loss([good, bad], labels, np.array([[0.5, 0.5], [0.5, 0.5]]))
    assert only_good.item() < 0.02 and both.item() > 1.0  # the bad teacher costs ≈ 5 per class


def test_labels_and_generator_shapes_and_learning():
    gen = torch.Generator().manual_seed(0)
    balanced = pseudo_labels(10, 3, "balanced", gen)
    assert balanced.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
    assert pseudo_labels(50, 3, "uniform", gen).unique().numel() == 3
    torch.manual_seed(0)
    g = ConditionalGenerator(3, 6)
    z = torch.randn(30, g.noise_dim)
    y = torch.arange(30) % 3
    opt = torch.optim.Adam(g.parameters(), lr=1e-2)
    first = diversity_loss(g(z, y)).item()
    for _ in range(50):
        opt.zero_grad()
        loss = diversity_loss(g(z, y))
        loss.backward()
        opt.step()
    assert g(z, y).shape == (30, 6) and loss.item() < first
