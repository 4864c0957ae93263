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
    return sorted(_disambiguate(out, list(groups.values())), key=lambda s: s.label)


def _disambiguate(rows: list[SeedSummary], groups: list[list[CellRow]]) -> list[SeedSummary]:
    """Where configurations share a label (a sweep over parameters), append the settings
    that tell them apart, e.g. ``PROTEINS/iid-3/fedavg [target.params.lr=0.01]``."""
    flat = [_flatten({k: v for k, v in g[0].config.items() if k != "seed"}) for g in groups]
    out = []
    for i, row in enumerate(rows):
        twins = [j for j, r in enumerate(rows) if r.label == row.label]
        if len(twins) == 1:
            out.append(row)
            continue
        keys = sorted({k for j in twins for k in flat[j]})
        differ = [k for k in keys if len({repr(flat[j].get(k)) for j in twins}) > 1]
        tag = ", ".join(f"{k}={flat[i].get(k, '-')}" for k in differ)
        out.append(
            SeedSummary(f"{row.label} [{tag}]", row.seeds, row.accuracy, row.macro_f1, row.auc)
        )
    return out


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _mean_std(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0


def format_pm(mean_std: tuple[float, float], scale: float = 100.0, digits: int = 1) -> str:
    if np.isnan(mean_std[0]):
        return "n/a"
    return f"{mean_std[0] * scale:.{digits}f} ± {mean_std[1] * scale:.{digits}f}"
