"""Attack metrics computed outside the attack, from ground truth.

TPR at a fixed low FPR is the figure the membership-inference literature now leads with
(Carlini et al. 2022); it is reported "n/a" (None) when there are fewer than 1/FPR negatives,
since such an FPR cannot be resolved."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

DEFAULT_FPRS = (0.1, 0.01, 0.001)


@dataclass(frozen=True)
class ROC:
    fpr: np.ndarray
    tpr: np.ndarray


def roc(scores: np.ndarray, truth: np.ndarray) -> ROC:
    fpr, tpr, _ = roc_curve(truth.astype(int), scores, drop_intermediate=False)
    return ROC(fpr, tpr)


def tpr_at_fpr(curve: ROC, target: float, negatives: int) -> float | None:
    if negatives < 1.0 / target:
        return None
    return float(curve.tpr[curve.fpr <= target].max())


def membership_metrics(
    scores: np.ndarray,
    truth: np.ndarray,
    threshold: float | None = None,
    fprs: tuple[float, ...] = DEFAULT_FPRS,
) -> tuple[dict[str, float | None], ROC]:
    truth = np.asarray(truth, dtype=bool)
    scores = np.asarray(scores, dtype=float)
    if scores.shape != truth.shape:
        raise ValueError(f"scores {scores.shape} and truth {truth.shape} differ in shape")
    pos, neg = int(truth.sum()), int((~truth).sum())
    if not pos or not neg:
        raise ValueError("membership metrics need both members and non-members")
    curve = roc(scores, truth)
    out: dict[str, float | None] = {
        "auc": float(roc_auc_score(truth, scores)),
        "advantage": float((curve.tpr - curve.fpr).max()),
        "members": float(pos),
        "nonmembers": float(neg),
    }
    for f in fprs:
        out[f"tpr@{f:g}"] = tpr_at_fpr(curve, f, neg)
    if threshold is not None:
        pred = scores > threshold
        tpr, tnr = pred[truth].mean(), (~pred[~truth]).mean()
        out["balanced_accuracy"] = float((tpr + tnr) / 2)
        out["threshold_fpr"] = float(1 - tnr)
        out["threshold_tpr"] = float(tpr)
    return out, curve
