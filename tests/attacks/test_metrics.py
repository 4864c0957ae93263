import numpy as np
import pytest

from attacks.metrics import membership_metrics, roc, tpr_at_fpr


def test_perfect_separation():
    truth = np.array([1] * 50 + [0] * 2000, dtype=bool)
    scores = truth.astype(float) + np.linspace(0, 0.1, truth.size)
    m, _ = membership_metrics(scores, truth)
    assert m["auc"] == 1.0 and m["advantage"] == 1.0
    assert m["tpr@0.1"] == m["tpr@0.01"] == m["tpr@0.001"] == 1.0


def test_random_scores_are_near_chance():
    rng = np.random.default_rng(0)
    truth = rng.random(20_000) < 0.5
    m, _ = membership_metrics(rng.random(truth.size), truth)
    assert abs(m["auc"] - 0.5) < 0.02
    assert m["tpr@0.01"] < 0.03


def test_low_fpr_is_na_without_enough_negatives():
    truth = np.array([1] * 10 + [0] * 50, dtype=bool)
    m, _ = membership_metrics(np.arange(60.0), truth)
    assert m["tpr@0.1"] is not None
    assert m["tpr@0.01"] is None and m["tpr@0.001"] is None


def test_tpr_at_fpr_reads_the_curve():
    truth = np.array([1, 1, 0, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    scores = np.arange(10, 0, -1.0)
    curve = roc(scores, truth)
    assert tpr_at_fpr(curve, 0.0 + 1e-9, negatives=10**9) == pytest.approx(2 / 3)
    assert tpr_at_fpr(curve, 1 / 7, negatives=7) == 1.0


def test_threshold_metrics():
    truth = np.array([1, 1, 0, 0], dtype=bool)
    m, _ = membership_metrics(np.array([0.9, 0.2, 0.1, 0.8]), truth, threshold=0.5)
    assert m["threshold_tpr"] == 0.5 and m["threshold_fpr"] == 0.5
    assert m["balanced_accuracy"] == 0.5


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="shape"):
        membership_metrics(np.zeros(3), np.zeros(4, dtype=bool))
    with pytest.raises(ValueError, match="both"):
        membership_metrics(np.zeros(3), np.ones(3, dtype=bool))
