"""The result of an attack that asks no yes/no question about each record (a hidden attribute,
a client's label distribution, a client's training data): its figures beside the baseline of
an adversary who ignores what the model gave out, each rate with its 95 % interval."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from fgl_workbench.attacks.metrics import CONFIDENCE, rate_bounds
from fgl_workbench.external.scores import interval_text, number_text


@dataclass(frozen=True)
class InferenceAudit:
    """One attack's figures: ``metrics`` as its family scores them in a suite (e.g.
    ``attribute_metrics``: ``accuracy`` and ``accuracy_baseline``; rates with
    ``<key>_ci_low``/``_ci_high``), ``shown``: the (figure, its baseline) pairs the summary
    prints, and ``count``: what was asked about (e.g. "2000 nodes")."""

    name: str
    family: str
    metrics: dict[str, float | None]
    shown: tuple[tuple[str, str | None], ...]
    count: str

    def summary_line(self) -> str:
        """One line: each shown figure (with its interval where it has one) and its
        baseline."""
        parts = []
        for key, baseline in self.shown:
            text = figure_text(self.metrics, key)
            if baseline is not None:
                text += f" (baseline {number_text(self.metrics.get(baseline))})"
            parts.append(f"{key} {text}")
        return f"{self.name}: " + ", ".join(parts) + f"; {self.count}"


def figure_text(m: dict[str, float | None], key: str) -> str:
    """``0.812 [0.790, 0.833]``, the value alone where it has no interval, n/a where none."""
    if m.get(f"{key}_ci_low") is None:
        return number_text(m.get(key))
    return interval_text(m, key)


def rate_interval(metrics: dict[str, float | None], key: str, n: int) -> None:
    """``metrics[key]``, a rate over ``n`` trials, gets its exact (Clopper–Pearson) 95 %
    interval as ``<key>_ci_low``/``_ci_high``."""
    hits = round(float(metrics[key] or 0.0) * n)
    metrics[f"{key}_ci_low"], metrics[f"{key}_ci_high"] = rate_bounds(hits, n)


def mean_interval(
    metrics: dict[str, float | None], key: str, values: np.ndarray, bounds: tuple[float, float]
) -> None:
    """``metrics[key]``, the mean of ``values`` (one per client, say), gets its 95 %
    t-interval kept within ``bounds``: with a handful of values a bootstrap would resample
    too few to be honest, the t quantile widens with them. None with one value."""
    if values.size < 2:
        metrics[f"{key}_ci_low"] = metrics[f"{key}_ci_high"] = None
        return
    half = student_t.ppf((1 + CONFIDENCE) / 2, values.size - 1) * values.std(ddof=1)
    half /= np.sqrt(values.size)
    metrics[f"{key}_ci_low"] = float(max(bounds[0], values.mean() - half))
    metrics[f"{key}_ci_high"] = float(min(bounds[1], values.mean() + half))
