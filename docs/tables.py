"""What the reproduction-table scripts in docs/ share: reading results stores, and
formatting mean ± population standard deviation (ddof = 0) over seeds."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from fgl_workbench.storage.store import AttackRow, CellRow, ResultsStore


def fmt(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    if not values:
        return "–"
    v = np.asarray(values, dtype=float) * scale
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}" if v.size > 1 else f"{v[0]:.{digits}f}"


def load(paths: list[str]) -> tuple[list[CellRow], dict[str, list[AttackRow]]]:
    """Cells and their attack rows from several stores. A cell id is its configuration and
    seed, so a cell stored by two suites is one experiment (same seed, same numbers): it is
    kept once, with the attack rows of both."""
    cells: dict[str, CellRow] = {}
    attacks: dict[str, list[AttackRow]] = defaultdict(list)
    seen: set[tuple[str, str, str]] = set()
    for p in paths:
        if not (Path(p) / "results.sqlite").exists():
            continue
        store = ResultsStore(p)
        for c in store.cells():
            cells.setdefault(c.cell_id, c)
        for a in store.attacks():
            key = (a.cell_id, a.attack, json.dumps(a.params, sort_keys=True))
            if key not in seen:
                seen.add(key)
                attacks[a.cell_id].append(a)
    return list(cells.values()), attacks
