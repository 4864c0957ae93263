"""Auditing with independent canaries: when nothing couples the canaries (each its own
coordinate of a linear model, its own noise and its own sampling draw), the m canaries of one
run are m independent repetitions of the same neighbouring pair, and the classic many-runs
analysis applies to them (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021/2023): a decision
rule is chosen on one half of the canaries, and the other half bounds that one rule's TPR and
FPR with Clopper–Pearson intervals. Unlike the one-run bounds (``audit``), which must hold
however the canaries depend on each other and so cannot reject a claim until the mechanism
exceeds it about twofold, this compares a point of the mechanism's own trade-off curve with
the claim's; it is valid only where the canaries' (score, inclusion) pairs are independent
given the inclusions, which the caller must guarantee. The rule is chosen to reject the
claim, not to bound ε: on a mechanism within its claim it often settles on a cut most
canaries pass, and its ε and μ bounds are then near 0.

The rule's (FPR, TPR) point, at its interval ends, is tested against a claimed trade-off
curve (``max_tpr``: the highest TPR the claim allows at each FPR), and turned into lower
bounds on ε at δ and on a Gaussian-DP μ."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta, norm

MaxTPR = Callable[[np.ndarray], np.ndarray]
"""FPR ↦ the highest TPR a claimed mechanism allows any test at that FPR (1 − f(FPR))."""


@dataclass(frozen=True)
class HeldOutTest:
    """One rule's verdict on held-out canaries. ``rejected``: its TPR, at the low end of its
    interval, exceeds what the claim allows at its FPR's high end; ``epsilon`` and ``mu``: the
    lower bounds that point certifies; the ceilings: what every held-out canary guessed
    right would certify. All hold together at ``confidence``."""

    threshold: float
    members: int
    hits: int
    nonmembers: int
    false_alarms: int
    tpr_low: float
    fpr_high: float
    rejected: bool
    epsilon: float
    mu: float
    epsilon_ceiling: float
    mu_ceiling: float
    confidence: float


def held_out_test(
    scores: np.ndarray,
    included: np.ndarray,
    max_tpr: MaxTPR,
    delta: float,
    confidence: float = 0.95,
) -> HeldOutTest:
    """Choose the threshold on the even-numbered canaries (the one whose interval ends stand
    furthest above the claim), bound it on the odd-numbered ones. Higher scores mean
    "included". The split is by index, which the mechanism never sees."""
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included, dtype=bool)
    if scores.shape != included.shape or scores.ndim != 1:
        raise ValueError(f"scores and included must be 1-D of one shape, got {scores.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    level = (1 - confidence) / 2  # one-sided, for the TPR's low end and the FPR's high end
    choose, test = slice(0, None, 2), slice(1, None, 2)
    threshold = _best_threshold(scores[choose], included[choose], max_tpr, level)
    s, t = scores[test], included[test]
    members, nonmembers = int(t.sum()), int((~t).sum())
    hits, false = int((s[t] >= threshold).sum()), int((s[~t] >= threshold).sum())
    tpr_low, fpr_high = _tpr_low(hits, members, level), _fpr_high(false, nonmembers, level)
    top_tpr, top_fpr = _tpr_low(members, members, level), _fpr_high(0, nonmembers, level)
    return HeldOutTest(
        threshold=threshold,
        members=members,
        hits=hits,
        nonmembers=nonmembers,
        false_alarms=false,
        tpr_low=tpr_low,
        fpr_high=fpr_high,
        rejected=bool(tpr_low > float(max_tpr(np.array([fpr_high]))[0])),
        epsilon=point_epsilon(tpr_low, fpr_high, delta),
        mu=point_mu(tpr_low, fpr_high),
        epsilon_ceiling=point_epsilon(top_tpr, top_fpr, delta),
        mu_ceiling=point_mu(top_tpr, top_fpr),
        confidence=confidence,
    )


def point_epsilon(tpr: float, fpr: float, delta: float) -> float:
    """The ε at δ that a test with this TPR and FPR rules out: ln((TPR − δ) / FPR), ≥ 0."""
    if tpr <= delta or fpr <= 0:
        return 0.0 if tpr <= delta else float("inf")
    return max(0.0, float(np.log((tpr - delta) / fpr)))


def point_mu(tpr: float, fpr: float) -> float:
    """The Gaussian-DP μ a test with this TPR and FPR rules out: Φ⁻¹(TPR) − Φ⁻¹(FPR), ≥ 0."""
    return max(0.0, float(norm.ppf(tpr) - norm.ppf(fpr)))


def _best_threshold(
    scores: np.ndarray, included: np.ndarray, max_tpr: MaxTPR, level: float
) -> float:
    """The score cut whose TPR low end stands furthest above the claim's TPR at its FPR high
    end, on these canaries (interval ends, so cuts that a handful of canaries pass are not
    chosen for their luck); +∞ (nobody passes) where no cut exists."""
    pos, neg = np.sort(scores[included]), np.sort(scores[~included])
    cuts = np.unique(scores)
    if not pos.size or not neg.size:
        return float("inf")
    hits = pos.size - np.searchsorted(pos, cuts, side="left")
    false = neg.size - np.searchsorted(neg, cuts, side="left")
    margin = _tpr_low(hits, pos.size, level) - max_tpr(_fpr_high(false, neg.size, level))
    return float(cuts[int(np.argmax(margin))])


def _tpr_low(k, n: int, level: float):
    """The one-sided Clopper–Pearson low end of k successes of n (0 where k = 0)."""
    k = np.asarray(k, dtype=float)
    low = np.where(k > 0, beta.ppf(level, np.maximum(k, 1), n - k + 1), 0.0)
    return float(low) if low.ndim == 0 else low


def _fpr_high(k, n: int, level: float):
    """The one-sided Clopper–Pearson high end of k successes of n (1 where k = n)."""
    k = np.asarray(k, dtype=float)
    high = np.where(k < n, beta.ppf(1 - level, k + 1, np.maximum(n - k, 1)), 1.0)
    return float(high) if high.ndim == 0 else high
