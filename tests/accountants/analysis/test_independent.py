"""The held-out many-runs test on independent canaries: it rejects a claim the scores'
mechanism exceeds, holds on a claim that is exact, and its split is the one it states."""

import numpy as np
import pytest
from scipy.stats import norm

from fgl_workbench.accountants.analysis.independent import held_out_test, point_epsilon, point_mu


def gdp_max_tpr(mu: float):
    """The highest TPR a μ-GDP mechanism allows at each FPR."""
    return lambda alpha: norm.cdf(norm.ppf(np.clip(alpha, 1e-300, 1.0)) + mu)


def gaussian_game(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores of an optimal test on a μ-GDP mechanism: members N(μ, 1), others N(0, 1)."""
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return rng.normal(size=m) + mu * included, included


def test_a_mechanism_twice_the_claim_is_rejected_with_bounds_above_the_claim():
    scores, included = gaussian_game(1.0, 20_000, seed=0)
    result = held_out_test(scores, included, gdp_max_tpr(0.5), delta=1e-5)
    assert result.rejected
    assert 0.5 < result.mu <= result.mu_ceiling
    assert result.members + result.nonmembers == 10_000  # the odd half


def test_an_exact_claim_holds_in_at_least_95_percent_of_games():
    rejected = sum(
        held_out_test(*gaussian_game(1.0, 4000, seed), gdp_max_tpr(1.0), delta=1e-5).rejected
        for seed in range(100)
    )
    assert rejected <= 5


def test_the_threshold_is_chosen_on_the_even_canaries_alone():
    scores, included = gaussian_game(1.0, 2000, seed=1)
    moved = scores.copy()
    moved[1::2] += np.random.default_rng(2).normal(size=moved[1::2].size)
    first = held_out_test(scores, included, gdp_max_tpr(0.5), delta=1e-5)
    second = held_out_test(moved, included, gdp_max_tpr(0.5), delta=1e-5)
    assert first.threshold == second.threshold


def test_perfect_separation_reaches_the_ceiling():
    included = np.arange(1000) % 4 < 2
    result = held_out_test(included.astype(float), included, gdp_max_tpr(0.1), delta=1e-5)
    assert result.rejected
    assert result.epsilon == pytest.approx(result.epsilon_ceiling)
    assert result.mu == pytest.approx(result.mu_ceiling)


def test_point_bounds():
    assert point_epsilon(0.5, 0.05, 0.0) == pytest.approx(np.log(10))
    assert point_epsilon(0.01, 0.05, 0.0) == 0.0
    assert point_mu(norm.cdf(1.0), 0.5) == pytest.approx(1.0)


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="scores and included"):
        held_out_test(np.zeros(3), np.zeros(4, dtype=bool), gdp_max_tpr(1.0), 1e-5)
    with pytest.raises(ValueError, match="confidence"):
        held_out_test(np.zeros(4), np.zeros(4, dtype=bool), gdp_max_tpr(1.0), 1e-5, 1.0)
