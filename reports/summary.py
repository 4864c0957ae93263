"""Summaries across seeds: cells that differ only in their seed are one configuration, shown
as mean ± sample standard deviation over the seeds."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from workbench.store import CellRow


@dataclass(frozen=True)
class SeedSummary:
    label: str
    seeds: list[int]
    accuracy: tuple[float, float]  # mean, std
    macro_f1: tuple[float, float]
    auc: tuple[float, float]


def across_seeds(cells: list[CellRow]) -> list[SeedSummary]:
    groups: dict[str, list[CellRow]] = defaultdict(list)
    for c in cells:
        key = json.dumps({k: v for k, v in c.config.items() if k != "seed"}, sort_keys=True)
        groups[key].append(c)
    out = []
    for members in groups.values():
        members.sort(key=lambda c: c.config["seed"])
        out.append(
            SeedSummary(
                label=members[0].label.rsplit("/seed", 1)[0],
                seeds=[c.config["seed"] for c in members],
                accuracy=_mean_std([c.utility["accuracy"] for c in members]),
                macro_f1=_mean_std([c.utility["macro_f1"] for c in members]),
                auc=_mean_std([c.utility.get("auc", float("nan")) for c in members]),
            )
        )
    return sorted(out, key=lambda s: s.label)


def _mean_std(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def format_pm(mean_std: tuple[float, float], scale: float = 100.0, digits: int = 1) -> str:
    if np.isnan(mean_std[0]):
        return "n/a"
    return f"{mean_std[0] * scale:.{digits}f} ± {mean_std[1] * scale:.{digits}f}"
