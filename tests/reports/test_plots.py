import matplotlib.pyplot as plt
import numpy as np
import pytest

from fgl_workbench.attacks.metrics import roc, score_levels
from fgl_workbench.reports.plots import (
    FPR_GRID,
    RocCurve,
    dp_tpr_ceiling,
    mean_roc,
    resolution,
    roc_band,
)
from fgl_workbench.reports.report import ceiling_findings


def test_dp_ceiling_is_the_hypothesis_testing_bound():
    fpr = np.array([0.0, 0.01, 0.5, 1.0])
    eps, delta = 1.0, 1e-5
    ceiling = dp_tpr_ceiling(fpr, eps, delta)
    assert ceiling[0] == pytest.approx(delta)
    assert ceiling[1] == pytest.approx(np.e * 0.01 + delta)
    assert ceiling[2] == pytest.approx(1 - np.exp(-1) * (0.5 - delta))
    assert ceiling[3] == 1.0
    # ε = 0 and δ = 0: no test beats chance
    assert np.allclose(dp_tpr_ceiling(FPR_GRID, 0.0, 0.0), FPR_GRID)
    # a huge ε does not overflow
    assert np.all(dp_tpr_ceiling(FPR_GRID, 1e4, delta) == 1.0)


def test_mean_roc_averages_vertically_on_the_grid():
    a = (np.array([0.0, 1.0]), np.array([0.0, 1.0]))
    b = (np.array([0.0, 1e-4, 1.0]), np.array([0.0, 1.0, 1.0]))
    fpr, tpr = mean_roc([a, b])
    assert np.array_equal(fpr, FPR_GRID)
    assert tpr[-1] == 1.0
    assert tpr[0] == pytest.approx((1e-4 + 1.0) / 2)


def _dp_curve(scores, truth, epsilon=1.0, delta=1e-5):
    """The report's curve for one seed's scores under an (ε, δ) ceiling, with its band."""
    curve = roc(scores, truth)
    stored = [(curve.fpr, curve.tpr)]
    fpr, tpr = mean_roc(stored)
    band = roc_band([score_levels(scores, truth)])
    return RocCurve(
        "d/p-1/t+dp-sgd", "mia-rmia", fpr, tpr, 1, (epsilon, delta), resolution(stored), band
    )


def test_one_false_positive_lifting_the_line_over_the_ceiling_is_no_violation():
    """The quickstart's case: RMIA under DP-SGD at ε = 1 with 240 members and 304 non-members,
    its line above the ceiling at FPR 1/304 because a handful of members outrank all but one
    non-member. The band reaches below the ceiling, so nothing is claimed."""
    rng = np.random.default_rng(0)
    truth = np.r_[np.ones(240, bool), np.zeros(304, bool)]
    scores = rng.random(truth.size)
    top = np.r_[np.flatnonzero(truth)[:5], np.flatnonzero(~truth)[:1]]
    scores[top] = [2.0, 1.99, 1.98, 1.97, 1.96, 1.95]  # five members, then one non-member
    c = _dp_curve(scores, truth)
    assert c.above_ceiling(line=True).size  # the line alone would say "violation"
    assert c.above_ceiling().size == 0
    findings = " ".join(ceiling_findings([c]))
    assert "not a violation" in findings and "nothing here contradicts the accounting" in findings
    assert "is wrong" not in findings


def test_a_band_wholly_above_the_ceiling_is_reported_as_a_violation():
    """A quarter of the members outrank every non-member: at ε = 1 no test may reach a TPR of
    25 % at FPR 1/304, and the band says so with room to spare."""
    rng = np.random.default_rng(1)
    truth = np.r_[np.ones(240, bool), np.zeros(304, bool)]
    scores = rng.random(truth.size) + 2.0 * (np.cumsum(truth) <= 60) * truth
    c = _dp_curve(scores, truth)
    crossed = c.above_ceiling()
    assert crossed.size and crossed.min() < 0.01
    findings = " ".join(ceiling_findings([c]))
    assert "the 95 % band lies wholly above the DP ceiling (ε = 1)" in findings
    assert "accounting or the defense's implementation is wrong" in findings


def test_the_band_is_seeded_and_holds_the_mean_curve():
    rng = np.random.default_rng(2)
    truth = rng.random(400) < 0.5
    scores = rng.normal(truth * 1.0, 1.0)
    levels = [score_levels(scores, truth)]
    low, high = roc_band(levels)
    again = roc_band(levels)
    assert np.array_equal(low, again[0]) and np.array_equal(high, again[1])
    curve = roc(scores, truth)
    _, tpr = mean_roc([(curve.fpr, curve.tpr)])
    inside = (low <= tpr + 1e-12) & (tpr <= high + 1e-12)
    body = (FPR_GRID >= 0.05) & (FPR_GRID <= 0.5)
    assert inside[body].all()  # away from the sparse tail the line sits inside
    assert (high - low)[body].min() > 0


@pytest.mark.parametrize(
    "scores",
    [
        np.r_[np.full(50, 1.7e308), np.full(50, -1.7e308)],  # a plug-in's extreme answers
        np.r_[np.full(99, 1e16), [1e16 + 2]],  # a range the float grid cannot split
        np.r_[np.full(3, np.nan), np.arange(97.0)],
        np.full(100, np.inf),
    ],
    ids=["±1.7e308", "1e16 apart by 2", "NaN", "all inf"],
)
def test_score_histograms_draw_scores_no_bins_can_hold_as_ranks(scores):
    """The review's B3/B4: such scores stopped every later report of the folder."""
    from fgl_workbench.reports.plots import drawable_scores, score_histogram_figure

    members = np.r_[np.ones(50, bool), np.zeros(50, bool)]
    shown, axis = drawable_scores(scores)
    assert np.isfinite(shown).all() and "rank" in axis
    plt.close(score_histogram_figure([("hostile", scores, members)]))


def test_tied_scores_rank_together_and_show_no_separation():
    from fgl_workbench.reports.plots import drawable_scores

    shown, _ = drawable_scores(np.r_[np.full(50, np.inf), np.full(50, np.inf)])
    assert np.unique(shown).size == 1
