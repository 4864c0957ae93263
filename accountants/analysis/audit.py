"""Empirical privacy auditing: statistically valid lower bounds on ε, and a one-shot estimate.

One-run audit (Steinke, Nasr & Jagielski, NeurIPS 2023): m canaries are each included with
probability 1/2, the auditor makes r include/exclude guesses and v are correct. Under (ε, δ)-DP,
with q = e^ε/(1+e^ε) and F(k) = P[Binomial(r, q) ≥ k],
    P[≥ v correct] ≤ F(v) + 2mδ · max_{i=1..v} (F(v−i) − F(v)) / i,
so a small p-value rejects "(ε, δ)-DP" and the largest rejected ε is a lower bound on ε.

f-DP one-run audit (Mahloujifar, Melis & Chaudhuri, ICML 2025): the same game tested against a
whole trade-off curve f rather than one (ε, δ) pair, which gives (a) a lower bound on ε at δ from
the (ε, δ) curves and (b) a lower bound on μ from the Gaussian-DP curves G_μ. `audit_bounds` runs
all three on one set of scores, with the ceiling each can reach with m canaries.

Gaussian estimate (Andrew et al., ICLR 2024): an ESTIMATE, not a bound, of the ε of the Gaussian
mechanism whose noise matches the spread of inserted vs never-inserted canary statistics."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from scipy.optimize import brentq
from scipy.special import bdtrc, gammaln
from scipy.stats import norm

_EPS_CAP = 1e3  # q = e^ε/(1+e^ε) is exactly 1.0 in floating point long before this
_TOL = 1e-9
_DEFAULT_FRACTIONS = (1 / 20, 1 / 10, 1 / 4)
_EXP_CAP = 700.0  # e^700 · (1 − y) is 0 or overflows past 1 for every float y ≤ 1, as e^ε would
_ROUNDING = 1e-9  # relative slack before the f-DP test calls a total of probabilities above one
_LOG_TINY = math.log(5e-324)  # smallest positive float: the floor of an f-DP p-value
_STD_NORMAL = NormalDist()

InverseBlowUp = Callable[[float], float]
"""y ↦ f(1 − y) for a symmetric trade-off function f. Under f-DP an event of probability y with
one value of a canary has probability at least f(1 − y) with the other."""


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
    return _largest_rejected(lambda eps: one_run_p_value(m, r, v, eps, delta) <= level)


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
    scores, included = _checked_scores(scores, included)
    _check_delta(delta, allow_zero=True)
    _check_confidence(confidence)
    counts = _correct_counts(scores, included, _guess_counts(scores.size, guesses))
    return _steinke_audit(scores.size, counts, delta, confidence)


def epsilon_delta_inverse_blow_up(epsilon: float, delta: float) -> InverseBlowUp:
    """The (ε, δ)-DP curve: f_{ε,δ}(1 − y) = max(0, 1 − δ − e^ε (1 − y), e^−ε (y − δ))."""
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}")
    _check_delta(delta, allow_zero=True)
    grow = math.exp(min(epsilon, _EXP_CAP))
    return lambda y: max(0.0, 1 - delta - grow * (1 - y), (y - delta) / grow)


def gaussian_inverse_blow_up(mu: float) -> InverseBlowUp:
    """The μ-Gaussian-DP curve: G_μ(1 − y) = Φ(Φ⁻¹(y) − μ), telling N(0, 1) from N(μ, 1)."""
    if not 0 <= mu < math.inf:
        raise ValueError(f"mu must be finite and >= 0, got {mu}")

    def inverse(y: float) -> float:
        if y <= 0 or y >= 1:
            return min(max(y, 0.0), 1.0)
        z = _STD_NORMAL.inv_cdf(y) - mu
        return 0.5 * math.erfc(-z / math.sqrt(2))  # Φ(z) without 1 + erf's cancellation

    return inverse


def fdp_rejects(m: int, r: int, v: int, inverse_blow_up: InverseBlowUp, level: float) -> bool:
    """True when no f-DP mechanism lets an auditor get v or more of r guesses right on m canaries
    with probability ≥ level, so a run with v right rejects "f-DP" at that level.

    Mahloujifar, Melis & Chaudhuri (2025), Sec. 4; proof as we use it. Each canary's bit is ±1
    with probability 1/2, the mechanism is f-DP in each bit (f symmetric; the others fixed),
    and from its output the auditor guesses exactly r bits (abstaining on the rest); C counts
    the right guesses. With R_k = E[C·1{C ≥ k}]/m and H_k = E[(r − C)·1{C ≥ k}]/m:
      (1) R_k ≤ 1 − f(H_{k−1}) for k = 1..r. For a canary i and the other bits fixed, "i guessed
          +1 and ≥ k − 1 right among the others" is "i right, C ≥ k" when s_i = +1 and "i wrong,
          C ≥ k − 1" when s_i = −1 (likewise for −1), so f-DP bounds the first probability by
          1 − f(second); averaging over s and i keeps it, 1 − f being concave (Jensen).
      (2) So H_{k−1} ≥ g(R_k), g = inverse_blow_up. If P[C ≥ v] ≥ level, keep only (1) for
          k ≤ v and move probability down: from above v to v, the excess over `level` from v to
          v − 1, then, from k = v − 1 down to 1, whatever level k holds beyond what (1) at k + 1
          forces, to k − 1. A move from level j down to j' lowers every R_k and raises every
          H_{k−1} for k ≤ j' + 1, and touches no term of (1) for k > j + 1; at j' + 1 < k ≤ j + 1
          (only k = j + 1 when j' = j − 1) it may break (1), but that is either dropped (k > v)
          or kept by leaving at j what (1) at j + 1 forces. The total is unchanged (≤ 1). What
          is left is the sequence below: R_v = level·v/m, H_v = level·(r − v)/m,
          H_k = max(H_{k+1}, g(R_{k+1})), R_k − R_{k+1} = k/(r − k)·(H_k − H_{k+1}) (mass
          added at level k), H_0 ≥ that, and R_0 + H_0 = (r/m)·total.
    Hence R_0 + H_0 > r/m contradicts P[C ≥ v] ≥ level. The sequence is the least total that
    (1) allows, so rejection is monotone: it only gets harder as f shrinks (ε or μ grows) or
    the level falls."""
    _check_counts(m, r, v)
    if not 0 < level <= 1:
        raise ValueError(f"level must be in (0, 1], got {level}")
    cap = (r / m) * (1 + _ROUNDING)
    right, wrong = level * v / m, level * (r - v) / m  # R_k, H_k
    for k in range(v - 1, -1, -1):
        forced = inverse_blow_up(right)
        if forced <= wrong:
            break  # nothing added at k, so nothing will be below it either
        right += k / (r - k) * (forced - wrong)
        wrong = forced
        if right + wrong > cap:
            return True
    return right + wrong > cap


def fdp_p_value(m: int, r: int, v: int, inverse_blow_up: InverseBlowUp) -> float:
    """Bound on P[v or more of r guesses right on m canaries] under f-DP: the smallest level
    `fdp_rejects` rejects (to 1e-15 relative, rounded up), 1.0 if none is."""
    _check_counts(m, r, v)
    if not fdp_rejects(m, r, v, inverse_blow_up, 1.0):
        return 1.0
    lo, hi = _LOG_TINY, 0.0  # bisection on log level: the bound can be astronomically small
    if fdp_rejects(m, r, v, inverse_blow_up, math.exp(lo)):
        return math.exp(lo)
    for _ in range(60):
        mid = (lo + hi) / 2
        if fdp_rejects(m, r, v, inverse_blow_up, math.exp(mid)):
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def fdp_epsilon(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Largest ε whose (ε, δ)-DP curve f_{ε,δ} the f-DP test rejects; 0.0 if none is. Valid for
    every (ε, δ)-DP mechanism, since (ε, δ)-DP is f_{ε,δ}-DP."""
    _check_counts(m, r, v)
    _check_delta(delta, allow_zero=True)
    _check_confidence(confidence)
    level = 1 - confidence
    return _largest_rejected(
        lambda eps: fdp_rejects(m, r, v, epsilon_delta_inverse_blow_up(eps, delta), level)
    )


def fdp_mu(m: int, r: int, v: int, confidence: float = 0.95) -> float:
    """Largest μ whose Gaussian-DP curve G_μ the f-DP test rejects; 0.0 if none is. A lower
    bound on μ only for mechanisms that are μ-GDP for some μ (the Gaussian and its subsampled
    or composed forms are only approximately so)."""
    _check_counts(m, r, v)
    _check_confidence(confidence)
    level = 1 - confidence
    return _largest_rejected(lambda mu: fdp_rejects(m, r, v, gaussian_inverse_blow_up(mu), level))


@dataclass(frozen=True)
class AuditBounds:
    """Every one-run statistic of one audit, each beside the most m canaries can certify.

    Each bound holds at `confidence` on its own (Bonferroni over the guess counts within it);
    quoting the larger of `steinke.epsilon` and `fdp_epsilon` as one bound needs the level
    halved. ε and μ protect one canary (the unit the canaries play) against the adversary
    whose view gave the scores. A bound under the claim means the claim was not contradicted,
    and says nothing about tightness when the bound is at its ceiling."""

    canaries: int
    confidence: float
    delta: float
    steinke: OneRunAudit  # Steinke, Nasr & Jagielski: ε at δ
    steinke_ceiling: float
    fdp_epsilon: float  # f-DP test of the (ε, δ) curves: ε at δ, for any mechanism
    fdp_ceiling: float
    mu: float  # f-DP test of the Gaussian-DP curves
    mu_ceiling: float
    mu_epsilon: float  # ε(δ) of G_mu: the ε bound IF the mechanism were Gaussian

    @property
    def certifiable(self) -> bool:
        """False when even every guess right certifies nothing at this size and confidence, so
        every bound is 0 by construction, not by evidence."""
        return max(self.steinke_ceiling, self.fdp_ceiling, self.mu_ceiling) > 0


def audit_bounds(
    scores: np.ndarray,
    included: np.ndarray,
    delta: float,
    confidence: float = 0.95,
    guesses: tuple[int, ...] | None = None,
) -> AuditBounds:
    """Steinke's ε, the f-DP ε and μ from one set of canary scores, with their ceilings.

    Guesses as in `one_run_epsilon_from_scores` (same candidates r, same Bonferroni)."""
    scores, included = _checked_scores(scores, included)
    _check_delta(delta, allow_zero=False)
    _check_confidence(confidence)
    m = scores.size
    candidates = _guess_counts(m, guesses)
    counts = _correct_counts(scores, included, candidates)
    per_test = _per_test_confidence(confidence, len(candidates))
    mu = max(fdp_mu(m, r, v, per_test) for r, v in counts)
    steinke_ceiling, fdp_ceiling, mu_ceiling = audit_ceilings(m, delta, confidence, candidates)
    return AuditBounds(
        canaries=m,
        confidence=confidence,
        delta=delta,
        steinke=_steinke_audit(m, counts, delta, confidence),
        steinke_ceiling=steinke_ceiling,
        fdp_epsilon=max(fdp_epsilon(m, r, v, delta, per_test) for r, v in counts),
        fdp_ceiling=fdp_ceiling,
        mu=mu,
        mu_ceiling=mu_ceiling,
        mu_epsilon=gaussian_mechanism_epsilon(mu, delta),
    )


def rejects_curve(
    scores: np.ndarray,
    included: np.ndarray,
    inverse_blow_up: InverseBlowUp,
    confidence: float = 0.95,
    guesses: tuple[int, ...] | None = None,
) -> bool:
    """Whether the f-DP test rejects "f-DP" for the curve ``inverse_blow_up`` (a claimed
    mechanism's own trade-off curve, say) from one set of canary scores, at any of the
    candidate guess counts, each at its Bonferroni share of 1 − confidence."""
    scores, included = _checked_scores(scores, included)
    _check_confidence(confidence)
    m = scores.size
    candidates = _guess_counts(m, guesses)
    level = (1 - confidence) / len(candidates)
    counts = _correct_counts(scores, included, candidates)
    return any(fdp_rejects(m, r, v, inverse_blow_up, level) for r, v in counts)


def audit_ceilings(
    m: int, delta: float, confidence: float = 0.95, guesses: tuple[int, ...] | None = None
) -> tuple[float, float, float]:
    """(Steinke ε, f-DP ε, μ) that m canaries certify when every guess is right, at the best
    candidate r: no audit of this size can report more."""
    _check_counts(m, 0, 0)
    _check_delta(delta, allow_zero=False)
    _check_confidence(confidence)
    return _ceilings(m, _guess_counts(m, guesses), delta, confidence)


@functools.lru_cache(maxsize=256)
def _ceilings(
    m: int, candidates: tuple[int, ...], delta: float, confidence: float
) -> tuple[float, float, float]:
    """Cached: every audit of one configuration has the same ceilings."""
    per_test = _per_test_confidence(confidence, len(candidates))
    return (
        max(one_run_epsilon(m, r, r, delta, per_test) for r in candidates),
        max(fdp_epsilon(m, r, r, delta, per_test) for r in candidates),
        max(fdp_mu(m, r, r, per_test) for r in candidates),
    )


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


def _largest_rejected(rejected: Callable[[float], bool]) -> float:
    """Largest parameter (ε or μ) the test rejects, by doubling then bisection; 0.0 if 0 is not
    rejected. Every value it returns was itself rejected."""
    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2 * hi
        if hi > _EPS_CAP:
            return lo
    while hi - lo > _TOL * max(1.0, hi):
        mid = (lo + hi) / 2
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _checked_scores(scores: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    return scores, included.astype(bool)


def _correct_counts(
    scores: np.ndarray, included: np.ndarray, candidates: tuple[int, ...]
) -> list[tuple[int, int]]:
    """(r, v) for each candidate r: "included" for the ⌈r/2⌉ highest scores, "excluded" for the
    ⌊r/2⌋ lowest, v of them right."""
    order = np.argsort(-scores, kind="stable")  # ties keep canary order, which hides nothing
    ranked = included[order]
    top_hits = np.concatenate([[0], np.cumsum(ranked)])  # included among the k highest
    bottom_hits = np.concatenate([[0], np.cumsum(~ranked[::-1])])  # excluded among k lowest
    return [(r, int(top_hits[r - r // 2] + bottom_hits[r // 2])) for r in candidates]


def _per_test_confidence(confidence: float, tests: int) -> float:
    """Bonferroni: each of `tests` guess counts tested at level (1 − confidence)/tests."""
    return 1 - (1 - confidence) / tests


def _steinke_audit(
    m: int, counts: list[tuple[int, int]], delta: float, confidence: float
) -> OneRunAudit:
    per_test = _per_test_confidence(confidence, len(counts))
    audits = [
        OneRunAudit(one_run_epsilon(m, r, v, delta, per_test), m, r, v, confidence, delta)
        for r, v in counts
    ]
    return max(audits, key=lambda audit: audit.epsilon)  # first of equals: the smallest r


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
