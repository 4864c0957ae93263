"""What the reproduction-table scripts in docs/ share: reading results stores, and
formatting mean ± standard deviation over seeds."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from workbench.store import AttackRow, CellRow, ResultsStore


def fmt(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    if not values:
        return "–"
    v = np.asarray(values, dtype=float) * scale
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}" if v.size > 1 else f"{v[0]:.{digits}f}"


def load(paths: list[str]) -> tuple[list[CellRow], dict[str, list[AttackRow]]]:
    cells, attacks = [], defaultdict(list)
    for p in paths:
        if not (Path(p) / "results.sqlite").exists():
            continue
        store = ResultsStore(p)
        cells += store.cells()
        for a in store.attacks():
            attacks[a.cell_id].append(a)
    return cells, attacks
