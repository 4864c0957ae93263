"""Metric-DP for released embeddings (CE-FedGNN, Theorem 3.6).

A Gaussian release of an L2-normalised embedding makes any two embeddings within distance ρ
(ε(ρ), δ)-indistinguishable. The paper picks ρ data-dependently: the q-th percentile, over
all nodes, of each node's distance to its k-th nearest neighbour among the normalised
embeddings. Then "for at least q % of nodes, the release is indistinguishable from each of its
k nearest neighbours" (a k-anonymity-style reading)."""

from __future__ import annotations

import numpy as np

from fgl_workbench.accountants.accountant import PrivacyReport, epsilon
from fgl_workbench.accountants.events import MetricGaussian
from fgl_workbench.accountants.ledger import PrivacyLedger


def rho_knn_percentile(
    embeddings: np.ndarray, k: int = 50, q: float = 90.0, normalize: bool = True
) -> float:
    """q-th percentile (numpy's linear rule) of the distance from each point to its k-th
    nearest other point; the point itself is excluded."""
    x = np.asarray(embeddings, dtype=float)
    if x.ndim != 2 or x.shape[0] <= k:
        raise ValueError(f"embeddings: need a 2-D array with more than k={k} rows (got {x.shape})")
    if not 0 <= q <= 100:
        raise ValueError(f"q: expected a percentile in [0, 100] (got {q})")
    if normalize:
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        if (norms == 0).any():
            raise ValueError("embeddings: a zero vector cannot be L2-normalised")
        x = x / norms
    return float(np.percentile(kth_neighbour_distance(x, k), q))


def kth_neighbour_distance(x: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """Each row's Euclidean distance to its k-th nearest other row, exactly, by blocks of
    squared distances (numpy only: the accountant stays quick to import)."""
    if not 1 <= k < len(x):
        raise ValueError(f"k: expected 1 <= k < {len(x)} rows (got {k})")
    x = np.asarray(x, dtype=np.float64)
    sq = (x * x).sum(1)
    out = np.empty(len(x))
    for start in range(0, len(x), chunk):
        block = x[start : start + chunk]
        d2 = sq[start : start + chunk, None] + sq[None, :] - 2.0 * block @ x.T
        np.maximum(d2, 0.0, out=d2)
        d2[np.arange(len(block)), np.arange(start, start + len(block))] = np.inf  # not itself
        out[start : start + len(block)] = np.partition(d2, k - 1, axis=1)[:, k - 1]
    return np.sqrt(out)


def metric_epsilon(
    sigma0: float, rho: float, releases: int, delta: float, **kwargs
) -> PrivacyReport:
    """ε(ρ) after ``releases`` Gaussian releases with noise std ``sigma0``."""
    return epsilon(PrivacyLedger((MetricGaussian(sigma0, releases),)), delta, rho=rho, **kwargs)
