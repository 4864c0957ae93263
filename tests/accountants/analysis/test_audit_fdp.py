"""The f-DP one-run audit (Mahloujifar, Melis & Chaudhuri 2025) and `audit_bounds`."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from fgl_workbench.accountants.analysis import audit

DELTA = 1e-5
CONFIDENCE = 0.95
TRIALS = 200
# Exceeding the truth is a Binomial(TRIALS, ≤ 0.05) count: allow the nominal rate plus 3 std.
MAX_MISS_RATE = 0.05 + 3 * math.sqrt(0.05 * 0.95 / TRIALS)


def _gaussian_scores(mu: float, m: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """rows × m canaries, each included w.p. 1/2; the auditor sees included·μ + N(0, 1), the
    Gaussian mechanism with sensitivity/noise μ (μ-GDP, ε(δ) exact)."""
    rng = np.random.default_rng(seed)
    included = rng.random((rows, m)) < 0.5
    return included * mu + rng.standard_normal((rows, m)), included


def _correct_guesses(scores: np.ndarray, included: np.ndarray, r: int) -> np.ndarray:
    """Per row: right guesses among "in" for the ⌈r/2⌉ highest and "out" for the ⌊r/2⌋ lowest."""
    ranked = np.take_along_axis(included, np.argsort(-scores, axis=1), axis=1)
    m = scores.shape[1]
    return ranked[:, : r - r // 2].sum(axis=1) + (~ranked[:, m - r // 2 :]).sum(axis=1)


def test_p_value_covers_randomised_response_and_stays_close():
    """Guessing every released bit of ε-randomised response gets Binomial(m, e^ε/(1+e^ε)) right,
    the worst case under ε-DP: the f-DP bound must cover it and should not be far above."""
    for m, v, eps in [(100, 70, 0.5), (100, 80, 1.0), (1000, 600, 0.3), (20, 18, 1.0)]:
        q = math.exp(eps) / (1 + math.exp(eps))
        tail = binom.sf(v - 1, m, q)
        bound = audit.fdp_p_value(m, m, v, audit.epsilon_delta_inverse_blow_up(eps, 0.0))
        assert tail <= bound <= 1.3 * tail


def test_p_value_covers_a_mechanism_that_leaks_with_probability_delta():
    """Each bit released w.p. δ, else nothing: (0, δ)-DP. Guessing r bits, leaked ones first
    (random otherwise), gets all r right w.p. E[2^−(r − leaks)⁺]; with m = 2 the bound is tight."""
    for m, delta, r, slack in [
        (2, 0.05, 1, 0.01),
        (2, 0.2, 1, 0.03),
        (5, 0.05, 2, 1),
        (100, 0.05, 2, 1),
    ]:
        leaks = binom(m, delta)
        all_right = sum(leaks.pmf(k) * 2.0 ** -max(r - k, 0) for k in range(m + 1))
        bound = audit.fdp_p_value(m, r, r, audit.epsilon_delta_inverse_blow_up(0.0, delta))
        assert all_right <= bound <= all_right + slack


def test_p_value_covers_the_gaussian_mechanism_with_abstention():
    """Monte Carlo of the Gaussian mechanism, guessing the extremes: the bound covers every
    tail P[≥ v right] and, guessing few, is close to it."""
    m, rows = 100, 20_000
    for mu, seed in ((1.0, 4), (2.0, 5)):
        scores, included = _gaussian_scores(mu, m, rows, seed)
        trade_off = audit.gaussian_inverse_blow_up(mu)
        for r in (10, 20, 50, 100):
            right = _correct_guesses(scores, included, r)
            for v in range(r // 2, r + 1):
                tail = np.mean(right >= v)
                assert audit.fdp_p_value(m, r, v, trade_off) >= tail - 4 * math.sqrt(tail / rows)
        tail = np.mean(_correct_guesses(scores, included, 10) == 10)
        assert audit.fdp_p_value(m, 10, 10, trade_off) <= tail + 0.1


def test_the_test_is_monotone_in_the_curve_and_the_level():
    """A weaker curve (larger ε or μ) or a smaller level is never rejected where a stronger one
    is not: what lets the largest rejected parameter stand as a bound."""
    for m, r, v in [(1000, 100, 92), (1000, 1000, 700), (200, 40, 40)]:
        for family in (
            lambda x: audit.epsilon_delta_inverse_blow_up(x, DELTA),
            audit.gaussian_inverse_blow_up,
        ):
            grid = np.linspace(0, 6, 61)
            rejected = [audit.fdp_rejects(m, r, v, family(x), 0.05) for x in grid]
            assert rejected == sorted(rejected, reverse=True)
            levels = np.geomspace(1e-6, 1, 40)
            rejected = [audit.fdp_rejects(m, r, v, family(0.5), level) for level in levels]
            assert rejected == sorted(rejected)


def test_bounds_stay_under_the_truth_on_a_gaussian_mechanism():
    mu = 1.0
    true_eps = audit.gaussian_mechanism_epsilon(mu, DELTA)
    scores, included = _gaussian_scores(mu, 100, TRIALS, seed=1)
    results = [audit.audit_bounds(s, b, DELTA) for s, b in zip(scores, included, strict=True)]
    mus = np.array([res.mu for res in results])
    for name, bounds, truth in [
        ("mu", mus, mu),
        ("mu_epsilon", np.array([res.mu_epsilon for res in results]), true_eps),
        ("fdp_epsilon", np.array([res.fdp_epsilon for res in results]), true_eps),
        ("steinke", np.array([res.steinke.epsilon for res in results]), true_eps),
    ]:
        assert np.mean(bounds > truth) <= MAX_MISS_RATE, name
    assert mus.mean() > 0.25 * mu  # not valid by being useless


def test_the_gaussian_curve_certifies_more_than_steinke():
    """m = 1000, true ε(1e-5) = 4.38: testing the Gaussian curve certifies far more than
    Steinke's ε; the f-DP test of the (ε, δ) curves loses at most 1 %, and pulls ahead where
    Steinke's 2mδ term grows (m = 10 000)."""
    true_eps = audit.gaussian_mechanism_epsilon(1.0, DELTA)
    scores, included = _gaussian_scores(1.0, 1000, 5, seed=2)
    for s, b in zip(scores, included, strict=True):
        res = audit.audit_bounds(s, b, DELTA)
        assert 1.3 * res.steinke.epsilon < res.mu_epsilon <= true_eps
        assert res.fdp_epsilon >= 0.99 * res.steinke.epsilon
    scores, included = _gaussian_scores(2.0, 10_000, 1, seed=3)
    res = audit.audit_bounds(scores[0], included[0], DELTA)
    assert res.fdp_epsilon > 1.03 * res.steinke.epsilon


def test_audit_bounds_uses_the_candidates_and_bonferroni_of_the_score_audit():
    scores, included = _gaussian_scores(1.0, 1000, 1, seed=6)
    res = audit.audit_bounds(scores[0], included[0], DELTA)
    assert res.steinke == audit.one_run_epsilon_from_scores(scores[0], included[0], DELTA)
    per_test = 1 - (1 - CONFIDENCE) / 4  # r = 100, 200, 500, 1000
    counts = [(r, int(_correct_guesses(scores, included, r)[0])) for r in (100, 200, 500, 1000)]
    assert res.fdp_epsilon == max(audit.fdp_epsilon(1000, r, v, DELTA, per_test) for r, v in counts)
    assert res.mu == max(audit.fdp_mu(1000, r, v, per_test) for r, v in counts)
    assert res.mu_epsilon == audit.gaussian_mechanism_epsilon(res.mu, DELTA)
    assert (res.canaries, res.confidence, res.delta) == (1000, CONFIDENCE, DELTA)


def test_ceilings_grow_with_the_canaries_and_are_reached_by_perfect_guesses():
    ceilings = [audit.audit_ceilings(m, DELTA) for m in (10, 30, 100, 300, 1000, 3000, 10_000)]
    for column in zip(*ceilings, strict=True):
        assert np.all(np.diff(column) > 0)
    for m in (30, 1000):
        included = np.arange(m) % 2 == 0
        res = audit.audit_bounds(included.astype(float), included, DELTA)  # every guess right
        assert (res.steinke.epsilon, res.fdp_epsilon, res.mu) == audit.audit_ceilings(m, DELTA)
        assert (res.steinke_ceiling, res.fdp_ceiling, res.mu_ceiling) == (
            res.steinke.epsilon,
            res.fdp_epsilon,
            res.mu,
        )
    scores, included = _gaussian_scores(4.0, 1000, 1, seed=7)
    res = audit.audit_bounds(scores[0], included[0], DELTA)
    assert res.steinke.epsilon <= res.steinke_ceiling
    assert res.fdp_epsilon <= res.fdp_ceiling and res.mu <= res.mu_ceiling


def test_wrong_guesses_and_too_few_canaries_certify_nothing():
    included = np.arange(1000) % 2 == 0
    res = audit.audit_bounds(-included.astype(float), included, DELTA)  # every guess wrong
    assert (res.steinke.epsilon, res.fdp_epsilon, res.mu, res.mu_epsilon) == (0, 0, 0, 0)
    assert res.certifiable and min(res.steinke_ceiling, res.fdp_ceiling, res.mu_ceiling) > 0
    included = np.array([1, 0, 1, 0], dtype=bool)
    res = audit.audit_bounds(included.astype(float), included, DELTA)  # right, but 2⁻⁴ > 5 %
    assert (res.steinke_ceiling, res.fdp_ceiling, res.mu_ceiling, res.mu) == (0, 0, 0, 0)
    assert not res.certifiable
    assert audit.fdp_p_value(100, 40, 0, audit.gaussian_inverse_blow_up(3.0)) == 1.0


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: audit.audit_bounds(np.ones(3), np.ones(4), DELTA), "included"),
        (lambda: audit.audit_bounds(np.array([1.0, np.inf]), np.ones(2), DELTA), "scores"),
        (lambda: audit.audit_bounds(np.ones(3), np.ones(3), 0.0), "delta"),
        (lambda: audit.audit_bounds(np.ones(3), np.ones(3), DELTA, 1.5), "confidence"),
        (lambda: audit.audit_bounds(np.ones(3), np.ones(3), DELTA, 0.9, (0,)), "guesses"),
        (lambda: audit.audit_ceilings(0, DELTA), "m"),
        (lambda: audit.audit_ceilings(10, 1.0), "delta"),
        (lambda: audit.fdp_rejects(10, 5, 6, audit.gaussian_inverse_blow_up(1.0), 0.05), "v"),
        (lambda: audit.fdp_rejects(10, 5, 2, audit.gaussian_inverse_blow_up(1.0), 0.0), "level"),
        (lambda: audit.fdp_p_value(10, 11, 2, audit.gaussian_inverse_blow_up(1.0)), "r"),
        (lambda: audit.fdp_epsilon(10, 5, 2, -0.1), "delta"),
        (lambda: audit.fdp_mu(10, 5, 2, 0.0), "confidence"),
        (lambda: audit.gaussian_inverse_blow_up(-1.0), "mu"),
        (lambda: audit.gaussian_inverse_blow_up(math.inf), "mu"),
        (lambda: audit.epsilon_delta_inverse_blow_up(math.nan, DELTA), "epsilon"),
    ],
)
def test_bad_inputs_name_the_field(call, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        call()
