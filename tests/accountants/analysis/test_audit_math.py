import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom, norm

from fgl_workbench.accountants.analysis import audit

M = 1000
TRIALS = 200
CONFIDENCE = 0.95
# Exceeding ε₀ is a Binomial(TRIALS, ≤ 0.05) count: allow the nominal rate plus 3 std.
MAX_MISS_RATE = 0.05 + 3 * math.sqrt(0.05 * 0.95 / TRIALS)


def _randomised_response(eps0: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TRIALS × M canaries, each included w.p. 1/2; the auditor sees the included bit flipped
    w.p. 1/(1+e^ε₀), an ε₀-DP release of each bit, plus tie-breaking noise in its score."""
    rng = np.random.default_rng(seed)
    included = rng.random((TRIALS, M)) < 0.5
    flipped = rng.random((TRIALS, M)) < 1 / (1 + math.exp(eps0))
    seen = included ^ flipped
    scores = seen + 0.5 * rng.random((TRIALS, M))
    return included, seen, scores


def _all_guessed_bounds(eps0: float, seed: int, delta: float = 1e-5) -> np.ndarray:
    """The auditor guesses every canary as its released bit: v ~ Binomial(M, e^ε₀/(1+e^ε₀))."""
    included, seen, _ = _randomised_response(eps0, seed)
    correct = (included == seen).sum(axis=1)
    return np.array([audit.one_run_epsilon(M, M, int(v), delta, CONFIDENCE) for v in correct])


def _reference_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The formula read off term by term, with scipy.stats and a plain loop."""
    q = math.exp(eps) / (1 + math.exp(eps))
    tail = binom.sf(v - 1, r, q)
    window = max((binom.cdf(v - 1, r, q) - binom.cdf(v - i - 1, r, q)) / i for i in range(1, v + 1))
    return min(tail + 2 * m * delta * window, 1.0)


def test_p_value_matches_the_formula():
    for m, r, v, eps, delta in [(1000, 1000, 700, 1.0, 1e-5), (50, 30, 28, 2.5, 1e-3)]:
        got = audit.one_run_p_value(m, r, v, eps, delta)
        assert got == pytest.approx(_reference_p_value(m, r, v, eps, delta), rel=1e-9)


def test_p_value_is_monotone_in_epsilon_and_reduces_to_the_binomial_tail():
    eps = np.linspace(0, 8, 81)
    for m, r, v in [(1000, 1000, 800), (1000, 200, 190), (100, 40, 25)]:
        p = [audit.one_run_p_value(m, r, v, e, 1e-5) for e in eps]
        assert np.all(np.diff(p) >= -1e-15)
        for e in (0.0, 0.7, 3.0):
            q = math.exp(e) / (1 + math.exp(e))
            tail = binom.sf(v - 1, r, q)
            assert audit.one_run_p_value(m, r, v, e, 0.0) == pytest.approx(tail, rel=1e-10)
    assert audit.one_run_p_value(100, 40, 0, 2.0, 1e-5) == 1.0
    assert audit.one_run_p_value(100, 0, 0, 2.0, 0.0) == 1.0


def test_epsilon_sits_on_the_rejection_boundary():
    eps = audit.one_run_epsilon(1000, 1000, 800, 1e-5, 0.95)
    assert audit.one_run_p_value(1000, 1000, 800, eps, 1e-5) <= 0.05
    assert audit.one_run_p_value(1000, 1000, 800, eps + 1e-6, 1e-5) > 0.05
    assert audit.one_run_epsilon(1000, 1000, 500, 1e-5) == 0.0  # chance accuracy
    assert audit.one_run_epsilon(1000, 1000, 800, 1e-5, 0.99) < eps


def test_bound_is_valid_and_useful_on_randomised_response():
    eps0 = 2.0
    bounds = _all_guessed_bounds(eps0, seed=0)
    assert np.mean(bounds > eps0) <= MAX_MISS_RATE
    assert bounds.mean() > 0.5 * eps0


def test_broken_mechanism_fails_its_claim():
    claimed = 1.0
    bounds = _all_guessed_bounds(8.0, seed=1)[:20]
    assert np.all(bounds > 3 * claimed)
    v = int(0.99 * M)
    assert audit.one_run_p_value(M, M, v, claimed, 0.0) < 1e-100
    assert audit.one_run_p_value(M, M, v, claimed, 1e-5) < 1e-3  # δ puts a floor under p


def test_score_audit_stays_valid_with_bonferroni():
    eps0 = 2.0
    included, _, scores = _randomised_response(eps0, seed=2)
    results = [
        audit.one_run_epsilon_from_scores(s, b, 1e-5, CONFIDENCE)
        for s, b in zip(scores, included, strict=True)
    ]
    bounds = np.array([res.epsilon for res in results])
    assert np.mean(bounds > eps0) <= MAX_MISS_RATE
    assert bounds.mean() > 0.5 * eps0
    assert {res.guesses for res in results} <= {100, 200, 500, 1000}
    res = results[0]
    assert (res.canaries, res.confidence, res.delta) == (M, CONFIDENCE, 1e-5)
    # the reported ε is that of its own guess count, tested at the corrected level
    corrected = 1 - (1 - CONFIDENCE) / 4
    assert res.epsilon == audit.one_run_epsilon(M, res.guesses, res.correct, 1e-5, corrected)


def test_score_audit_counts_guesses_from_both_ends():
    scores = np.array([9.0, 8.0, 7.0, 1.0, 0.5, 0.0])
    included = np.array([1, 1, 0, 1, 0, 0], dtype=bool)
    res = audit.one_run_epsilon_from_scores(scores, included, 0.0, guesses=(4,))
    assert (res.guesses, res.correct) == (4, 4)  # top 2 included, bottom 2 excluded
    res = audit.one_run_epsilon_from_scores(scores, included, 0.0, guesses=(6,))
    assert (res.guesses, res.correct) == (6, 4)  # top 3 vs bottom 3
    assert res.epsilon == audit.one_run_epsilon(6, 6, 4, 0.0, 0.95)


def test_gaussian_estimate_matches_the_gaussian_mechanism():
    rng = np.random.default_rng(3)
    mu, delta = 1.0, 1e-5
    unobserved = rng.standard_normal(200_000)
    observed = mu + rng.standard_normal(200_000)

    def delta_gap(eps: float) -> float:  # Balle & Wang (2018), Theorem 8
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta

    exact = brentq(delta_gap, 0.0, 50.0, xtol=1e-12)
    assert audit.gaussian_mechanism_epsilon(mu, delta) == pytest.approx(exact, rel=1e-8)
    estimate = audit.gaussian_epsilon_estimate(observed, unobserved, delta)
    assert estimate == pytest.approx(exact, rel=0.02)
    assert audit.gaussian_epsilon_estimate(unobserved, observed, delta) == estimate


def test_gaussian_mechanism_epsilon_agrees_with_dp_accounting():
    dp_accounting = pytest.importorskip("dp_accounting")
    for mu in (0.1, 0.5, 2.0, 10.0):
        for delta in (1e-3, 1e-6):
            ours = audit.gaussian_mechanism_epsilon(mu, delta)
            theirs = dp_accounting.get_epsilon_gaussian(1 / mu, delta)
            assert ours == pytest.approx(theirs, rel=1e-6)


def test_gaussian_estimate_edge_cases():
    assert audit.gaussian_epsilon_estimate([1.0, 2.0], [2.0, 1.0], 1e-5) == 0.0
    assert audit.gaussian_epsilon_estimate([1.0, 1.0], [0.0, 0.0], 1e-5) == math.inf
    assert audit.gaussian_mechanism_epsilon(0.0, 1e-5) == 0.0
    assert audit.gaussian_mechanism_epsilon(0.01, 0.5) == 0.0  # δ above δ(0)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: audit.one_run_p_value(10, 11, 5, 1.0, 1e-5), "r"),
        (lambda: audit.one_run_p_value(10, 5, 6, 1.0, 1e-5), "v"),
        (lambda: audit.one_run_p_value(10, 5, -1, 1.0, 1e-5), "v"),
        (lambda: audit.one_run_p_value(0, 0, 0, 1.0, 1e-5), "m"),
        (lambda: audit.one_run_p_value(10, 5, 2, -1.0, 1e-5), "epsilon"),
        (lambda: audit.one_run_epsilon(10, 5, 2, 1.0), "delta"),
        (lambda: audit.one_run_epsilon(10, 5, 2, -1e-5), "delta"),
        (lambda: audit.one_run_epsilon(10, 5, 2, 1e-5, 1.0), "confidence"),
        (lambda: audit.one_run_epsilon(10, 5, 2.5, 1e-5), "v"),
        (lambda: audit.one_run_epsilon_from_scores(np.ones(3), np.ones(4), 1e-5), "included"),
        (lambda: audit.one_run_epsilon_from_scores(np.ones(3), np.full(3, 2), 1e-5), "included"),
        (lambda: audit.one_run_epsilon_from_scores(np.array([]), np.array([]), 1e-5), "scores"),
        (lambda: audit.one_run_epsilon_from_scores(np.ones(3), np.ones(3), 1e-5, 0.0), "confid"),
        (lambda: audit.one_run_epsilon_from_scores(np.ones(3), np.ones(3), 1e-5, 0.9, (4,)), "gue"),
        (lambda: audit.one_run_epsilon_from_scores(np.ones(3), np.ones(3), 1e-5, 0.9, ()), "gue"),
        (lambda: audit.gaussian_epsilon_estimate([1.0], [0.0, 1.0], 1e-5), "observed"),
        (lambda: audit.gaussian_epsilon_estimate([1.0, 2.0], [np.nan, 1.0], 1e-5), "unobserved"),
        (lambda: audit.gaussian_epsilon_estimate([1.0, 2.0], [0.0, 1.0], 0.0), "delta"),
    ],
)
def test_bad_inputs_name_the_field(call, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        call()
