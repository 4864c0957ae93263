"""Ways to plant rows and artifacts in a received results folder, as someone else could."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

RECEIVED = Path(__file__).with_name("before_issue_42") / "folder"
METRICS = {"auc": 0.6, "auc_ci_low": 0.5, "auc_ci_high": 0.7, "tpr@0.1": 0.2}


def execute(folder: Path, *statements: str, params: tuple = ()) -> None:
    """Runs ``statements`` on the folder's database as whoever crafted it would."""
    db = sqlite3.connect(folder / "results.sqlite")
    for i, sql in enumerate(statements):
        db.execute(sql, params if i == len(statements) - 1 else ())
    db.commit()
    db.close()


def first_cell(folder: Path) -> str:
    db = sqlite3.connect(folder / "results.sqlite")
    (cell_id,) = db.execute("SELECT cell_id FROM cells ORDER BY label").fetchone()
    db.close()
    return cell_id


def plant_attack(
    folder: Path,
    params: dict | None = None,
    artifact: str | None = None,
    reason: str | None = None,
    status: str = "ok",
) -> None:
    """An attack row on the first cell, with ``params``, a ROC ``artifact`` and ``reason``."""
    execute(
        folder,
        "INSERT INTO attacks VALUES (?, 'planted', 'mia-threshold', 'h', ?, ?, ?, ?, ?, 1, 0)",
        params=(
            first_cell(folder),
            json.dumps(params or {}),
            status,
            reason,
            json.dumps(METRICS),
            artifact,
        ),
    )
