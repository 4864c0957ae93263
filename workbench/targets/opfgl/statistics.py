"""O-pFGL's class statistics as additive sums, and the server's pooling (Eq. 8 / Eq. 12).

A client's statistics of class c are the sufficient sums of its rows H_v (v labelled, or
reliably pseudo-labelled, of class c): S0 = n, S1 = Σ H_v, S2 = Σ H_v² (element-wise). Sums
add across clients, so a secure sum reveals exactly the pooled statistics:
μ_c = ΣS1 / ΣS0 and σ²_c = (ΣS2 − ΣS0·μ_c²) / (ΣS0 − 1), the unbiased pooled variance
whatever the clients' non-IIDness. The official code divides by N_c − m_c instead (m_c: the
clients contributing class c); ``denominator: official`` reproduces it, with m_c summed too.

Layout of one client's flat vector (what a mask or a ciphertext carries), per class:
[S0, m, S1 (D values), S2 (D values)], a class below the minimum count all zeros, so even
which classes a client holds stays hidden."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from fgl_workbench.targets.class_statistics import ClassStatistics

Denominator = Literal["unbiased", "official"]


@dataclass(frozen=True)
class Sums:
    """Sufficient statistics per class: counts [C], contributors [C], S1 and S2 [C, D]."""

    s0: np.ndarray
    contributors: np.ndarray
    s1: np.ndarray
    s2: np.ndarray

    def flat(self) -> np.ndarray:
        """[C · (2 + 2D)]: the vector a secure sum adds."""
        return np.concatenate(
            [self.s0[:, None], self.contributors[:, None], self.s1, self.s2], 1
        ).reshape(-1)

    @classmethod
    def from_flat(cls, vector: np.ndarray, num_classes: int) -> Sums:
        rows = np.asarray(vector, dtype=np.float64).reshape(num_classes, -1)
        d = (rows.shape[1] - 2) // 2
        return cls(rows[:, 0], rows[:, 1], rows[:, 2 : 2 + d], rows[:, 2 + d :])

    def __add__(self, other: Sums) -> Sums:
        return Sums(
            self.s0 + other.s0,
            self.contributors + other.contributors,
            self.s1 + other.s1,
            self.s2 + other.s2,
        )


def class_sums(h: np.ndarray, labels: np.ndarray, num_classes: int, min_count: int) -> Sums:
    """The sums of ``h``'s rows by class (``labels`` [n]); classes with fewer than
    ``min_count`` rows contribute nothing."""
    d = h.shape[1]
    s0 = np.zeros(num_classes)
    s1, s2 = np.zeros((num_classes, d)), np.zeros((num_classes, d))
    for c in range(num_classes):
        rows = h[labels == c]
        if rows.shape[0] >= min_count and rows.shape[0] > 0:
            s0[c], s1[c], s2[c] = rows.shape[0], rows.sum(0), (rows**2).sum(0)
    return Sums(s0, (s0 > 0).astype(np.float64), s1, s2)


def statistics_from_sums(sums: Sums, num_features: int) -> ClassStatistics:
    """One client's upload in the paper's form (n, μ, σ with the unbiased std) from its sums;
    the inverse of ``sums_from_statistics``."""
    n = sums.s0
    safe = np.where(n > 0, n, 1.0)[:, None]
    mean = sums.s1 / safe
    var = (sums.s2 - n[:, None] * mean**2) / np.where(n > 1, n - 1, 1.0)[:, None]
    std = np.sqrt(np.clip(var, 0.0, None)) * (n > 1)[:, None]
    return ClassStatistics(np.rint(n).astype(np.int64), mean, std, num_features)


def sums_from_statistics(stats: ClassStatistics) -> Sums:
    """S0, S1 = n·μ and S2 = (n−1)·σ² + n·μ² from an upload of (n, μ, σ)."""
    n = stats.counts.astype(np.float64)
    s1 = n[:, None] * stats.means
    s2 = (n - 1).clip(0)[:, None] * stats.stds**2 + n[:, None] * stats.means**2
    return Sums(n, (n > 0).astype(np.float64), s1, s2)


@dataclass(frozen=True)
class Pooled:
    """The global class statistics the surrogate graph is fitted to."""

    counts: np.ndarray  # N_c
    means: np.ndarray  # μ_c [C, D]
    variances: np.ndarray  # σ²_c [C, D]


def pooled(sums: Sums, denominator: Denominator = "unbiased") -> Pooled:
    """μ_c and σ²_c from the summed statistics (Eq. 12's sum form, equal to Eq. 8). A noisy
    sum (a DP defense) can make the variance negative: it is clamped at 0."""
    n = sums.s0
    safe = np.where(n > 0, n, 1.0)[:, None]
    mean = sums.s1 / safe
    spread = sums.s2 - n[:, None] * mean**2
    div = n - 1 if denominator == "unbiased" else n - sums.contributors
    var = spread / np.where(div > 0, div, 1.0)[:, None]
    return Pooled(n, mean, np.clip(var, 0.0, None) * (div > 0)[:, None])


def pooled_direct(uploads: list[ClassStatistics], denominator: Denominator = "unbiased") -> Pooled:
    """Eq. 8 term by term from the clients' (n, μ, σ): the within-client spread plus the
    between-client spread, over N_c − 1 (or N_c − m_c). Kept beside ``pooled`` as its check."""
    n = np.stack([u.counts for u in uploads]).astype(np.float64)  # [K, C]
    mu = np.stack([u.means for u in uploads])  # [K, C, D]
    var = np.stack([u.stds**2 for u in uploads])
    total = n.sum(0)
    mean = (n[:, :, None] * mu).sum(0) / np.where(total > 0, total, 1.0)[:, None]
    spread = ((n - 1).clip(0)[:, :, None] * var + n[:, :, None] * (mu - mean) ** 2).sum(0)
    div = total - 1 if denominator == "unbiased" else total - (n > 0).sum(0)
    return Pooled(total, mean, spread / np.where(div > 0, div, 1.0)[:, None] * (div > 0)[:, None])
