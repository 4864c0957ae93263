"""FedTAD's reliability: return probabilities and φ on the path graph of the method note's toy
check (computed there by hand with numpy), weights that sum to one per class, no NaN."""

import numpy as np
import pytest
import torch

from fgl_workbench.targets.fedtad.reliability import (
    class_reliability,
    node_reliability,
    reliability_weights,
    return_probabilities,
)

PATH = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])  # 0 – 1 – 2 – 3
X = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
Y = np.array([0, 0, 1, 1])


def test_return_probabilities_on_a_path_with_self_loops():
    rw = return_probabilities(PATH, 4, steps=2)
    expected = [[0.5, 0.41667], [0.33333, 0.38889], [0.33333, 0.38889], [0.5, 0.41667]]
    assert rw == pytest.approx(np.array(expected), abs=1e-5)


@pytest.mark.parametrize(("variant", "phi"), [("paper", 1.5907), ("code", 1.7286)])
def test_reliability_matches_the_method_notes_toy_check(variant, phi):
    got = class_reliability(X, PATH, Y, np.ones(4, bool), 2, steps=2, variant=variant)
    assert got == pytest.approx([phi, phi], abs=1e-4)


def test_code_variant_lies_between_one_over_degree_plus_one_and_one():
    rng = np.random.default_rng(0)
    h = rng.random((30, 5))  # non-negative: every cosine in [0, 1]
    edges = torch.from_numpy(rng.integers(0, 30, (2, 80)))
    edges = torch.cat([edges, edges.flip(0)], 1)
    r = node_reliability(h, edges, "code")
    degree = np.bincount(edges[0][edges[0] != edges[1]].numpy(), minlength=30)
    assert np.all(r >= 1.0 / (degree + 1) - 1e-12) and np.all(r <= 1.0 + 1e-12)
    isolated = node_reliability(h, torch.zeros(2, 0, dtype=torch.long), "code")
    assert np.allclose(isolated, 1.0)
    assert np.allclose(node_reliability(h, torch.zeros(2, 0, dtype=torch.long), "paper"), 0.0)


def test_unlabelled_classes_get_nothing_and_weights_sum_to_one_without_nan():
    phi = class_reliability(X, PATH, Y, np.array([True, True, False, False]), 3, steps=2)
    assert phi[1] == 0.0 and phi[2] == 0.0 and phi[0] > 0
    weights = reliability_weights(np.array([[2.0, 0.0, 1.0], [1.0, 0.0, 3.0]]))
    assert not np.isnan(weights).any()
    assert weights.sum(0) == pytest.approx([1.0, 0.0, 1.0])


def test_reliability_does_not_depend_on_node_order():
    perm = np.array([2, 0, 3, 1])
    inverse = np.argsort(perm)
    edges = torch.from_numpy(inverse[PATH.numpy()])
    got = class_reliability(X[perm], edges, Y[perm], np.ones(4, bool), 2, steps=2)
    assert got == pytest.approx(class_reliability(X, PATH, Y, np.ones(4, bool), 2, steps=2))
