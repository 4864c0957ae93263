"""Empirical privacy auditing: statistically valid lower bounds on ε, and a one-shot estimate.

One-run audit (Steinke, Nasr & Jagielski, NeurIPS 2023): m canaries are each included with
probability 1/2, the auditor makes r include/exclude guesses and v are correct. Under (ε, δ)-DP,
with q = e^ε/(1+e^ε) and F(k) = P[Binomial(r, q) ≥ k],
    P[≥ v correct] ≤ F(v) + 2mδ · max_{i=1..v} (F(v−i) − F(v)) / i,
so a small p-value rejects "(ε, δ)-DP" and the largest rejected ε is a lower bound on ε.

Gaussian estimate (Andrew et al., ICLR 2024): an ESTIMATE, not a bound, of the ε of the Gaussian
mechanism whose noise matches the spread of inserted vs never-inserted canary statistics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import bdtrc, gammaln
from scipy.stats import norm

_EPS_CAP = 1e3  # q = e^ε/(1+e^ε) is exactly 1.0 in floating point long before this
_TOL = 1e-9
_DEFAULT_FRACTIONS = (1 / 20, 1 / 10, 1 / 4)


@dataclass(frozen=True)
class OneRunAudit:
    """The guess count the score audit reported, with its lower bound on ε."""

    epsilon: float
    canaries: int
    guesses: int
    correct: int
    confidence: float
    delta: float


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability, under (ε, δ)-DP, of v or more correct guesses out of r on m canaries."""
    _check_counts(m, r, v)
    _check_delta(delta, allow_zero=True)
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    if v == 0:
        return 1.0
    log_q = -np.logaddexp(0.0, -epsilon)  # log of e^ε/(1+e^ε), exact for huge ε
    log_1mq = -np.logaddexp(0.0, epsilon)
    beta = float(bdtrc(v - 1, r, np.exp(log_q)))  # P[Binomial(r, q) ≥ v]
    if delta == 0:
        return min(beta, 1.0)
    # P[v−i ≤ B < v] as a running sum of pmf terms, exact where both tails are near 1
    j = np.arange(v - 1, -1, -1, dtype=float)
    log_pmf = gammaln(r + 1) - gammaln(j + 1) - gammaln(r - j + 1) + j * log_q + (r - j) * log_1mq
    windows = np.cumsum(np.exp(log_pmf))
    alpha = float(np.max(windows / np.arange(1, v + 1)))
    return min(beta + 2 * m * delta * alpha, 1.0)


def one_run_epsilon(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Largest ε whose "(ε, δ)-DP" is rejected at level 1 − confidence; 0.0 if none is.

    Any rejected ε is a valid lower bound on its own, because (ε, δ)-DP implies (ε', δ)-DP for
    every ε' > ε; bisection therefore cannot overstate even where p is not monotone in ε."""
    _check_counts(m, r, v)
    _check_delta(delta, allow_zero=True)
    _check_confidence(confidence)
    level = 1 - confidence
    if one_run_p_value(m, r, v, 0.0, delta) > level:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) <= level:
        lo, hi = hi, 2 * hi
        if hi > _EPS_CAP:
            return lo
    while hi - lo > _TOL * max(1.0, hi):
        mid = (lo + hi) / 2
        if one_run_p_value(m, r, v, mid, delta) <= level:
            lo = mid
        else:
            hi = mid
    return lo


def one_run_epsilon_from_scores(
    scores: np.ndarray,
    included: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    guesses: tuple[int, ...] | None = None,
) -> OneRunAudit:
    """One-run audit of canaries ranked by score (higher = more likely included).

    Each candidate guess count r guesses "included" for the ⌈r/2⌉ highest scores and "excluded"
    for the ⌊r/2⌋ lowest. Picking the best of several r on the same canaries would overstate
    the bound, so each is tested at level (1 − confidence)/len(candidates) (Bonferroni) and the
    largest ε is reported; the result holds at the stated confidence. Default candidates:
    r = 2·round(m·f) for f in 1/20, 1/10, 1/4, and r = m (no abstention)."""
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    if included.shape != scores.shape:
        raise ValueError(f"included must have shape {scores.shape}, got {included.shape}")
    if not np.isin(included, (0, 1)).all():
        raise ValueError("included must hold booleans (or 0/1)")
    _check_delta(delta, allow_zero=True)
    _check_confidence(confidence)
    m = scores.size
    candidates = _guess_counts(m, guesses)
    order = np.argsort(-scores, kind="stable")  # ties keep canary order, which hides nothing
    ranked = included.astype(bool)[order]
    top_hits = np.concatenate([[0], np.cumsum(ranked)])  # included among the k highest
    bottom_hits = np.concatenate([[0], np.cumsum(~ranked[::-1])])  # excluded among k lowest
    per_test = 1 - (1 - confidence) / len(candidates)
    best: OneRunAudit | None = None
    for r in candidates:
        k_plus = r - r // 2
        v = int(top_hits[k_plus] + bottom_hits[r // 2])
        eps = one_run_epsilon(m, r, v, delta, per_test)
        if best is None or eps > best.epsilon:
            best = OneRunAudit(eps, m, r, v, confidence, delta)
    assert best is not None
    return best


def gaussian_epsilon_estimate(observed: np.ndarray, unobserved: np.ndarray, delta: float) -> float:
    """ESTIMATE (not a bound) of ε at δ from canary statistics, after Andrew et al. (2024).

    Treats the statistics (e.g. cosines) of inserted and never-inserted canaries as two Gaussians
    with a pooled std, so μ = |mean difference| / std plays the sensitivity-to-noise ratio, and
    returns the exact ε(δ) of that Gaussian mechanism (Balle & Wang 2018). It has no confidence
    level and can under- or overshoot the true ε; use the one-run audit for a guarantee."""
    obs = np.asarray(observed, dtype=float).ravel()
    unobs = np.asarray(unobserved, dtype=float).ravel()
    for name, x in (("observed", obs), ("unobserved", unobs)):
        if x.size < 2:
            raise ValueError(f"{name} needs at least 2 values, got {x.size}")
        if not np.isfinite(x).all():
            raise ValueError(f"{name} must be finite")
    _check_delta(delta, allow_zero=False)
    gap = abs(obs.mean() - unobs.mean())
    dof = obs.size + unobs.size - 2
    pooled = np.sqrt(
        (obs.var(ddof=1) * (obs.size - 1) + unobs.var(ddof=1) * (unobs.size - 1)) / dof
    )
    if gap == 0:
        return 0.0
    if pooled == 0:
        return float("inf")
    return gaussian_mechanism_epsilon(float(gap / pooled), delta)


def gaussian_mechanism_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of the Gaussian mechanism with sensitivity/noise ratio μ (Balle & Wang 2018):
    the root of δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), solved in log space."""
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0, got {mu}")
    _check_delta(delta, allow_zero=False)
    if mu == 0:
        return 0.0
    if np.isinf(mu):
        return float("inf")
    log_delta = np.log(delta)

    def gap(eps: float) -> float:
        la = norm.logcdf(mu / 2 - eps / mu)
        lb = norm.logcdf(-mu / 2 - eps / mu)
        with np.errstate(divide="ignore"):
            log_d = la + np.log1p(-np.exp(min(eps + lb - la, 0.0)))
        return float(max(log_d, -1e4) - log_delta)  # finite, so brentq can interpolate

    if gap(0.0) <= 0:
        return 0.0
    hi = max(1.0, mu * mu)
    while gap(hi) > 0:
        hi *= 2
    return float(brentq(gap, 0.0, hi, xtol=1e-12, rtol=1e-12))


def _guess_counts(m: int, guesses: tuple[int, ...] | None) -> tuple[int, ...]:
    if guesses is None:
        grid = {2 * max(1, round(m * f)) for f in _DEFAULT_FRACTIONS}
        return tuple(sorted({r for r in grid if r <= m} | {m}))
    if len(guesses) == 0:
        raise ValueError("guesses must not be empty")
    for r in guesses:
        if isinstance(r, bool) or not isinstance(r, int | np.integer) or not 1 <= r <= m:
            raise ValueError(f"guesses must be integers in [1, {m}], got {r!r}")
    return tuple(sorted({int(r) for r in guesses}))


def _check_counts(m: int, r: int, v: int) -> None:
    for name, x in (("m", m), ("r", r), ("v", v)):
        if isinstance(x, bool) or not isinstance(x, int | np.integer):
            raise ValueError(f"{name} must be an integer, got {x!r}")
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    if not 0 <= r <= m:
        raise ValueError(f"r must be in [0, m={m}], got {r}")
    if not 0 <= v <= r:
        raise ValueError(f"v must be in [0, r={r}], got {v}")


def _check_delta(delta: float, allow_zero: bool) -> None:
    ok = 0 <= delta < 1 if allow_zero else 0 < delta < 1
    if not ok:
        raise ValueError(f"delta must be in {'[0' if allow_zero else '(0'}, 1), got {delta}")


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
