"""``export`` of a received folder: text a spreadsheet would run as a formula is written as
text, and the file is replaced whole, never written through another name."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

from fgl_workbench.interface.cli import main

RECEIVED = Path(__file__).parents[1] / "storage" / "before_issue_42" / "folder"
FORMULAS = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]


def test_formula_cells_are_written_as_text(tmp_path, capsys):
    import sqlite3

    folder = tmp_path / "received"
    shutil.copytree(RECEIVED, folder)
    db = sqlite3.connect(folder / "results.sqlite")
    (cell,) = db.execute("SELECT cell_id FROM cells ORDER BY label LIMIT 1").fetchone()
    db.executemany(
        "INSERT INTO attacks VALUES (?, ?, 'mia-threshold', 'h', '{}', 'not_applicable', ?, "
        "NULL, NULL, 1, 0)",
        [(cell, f"k{i}", text) for i, text in enumerate(FORMULAS)],
    )
    db.commit()
    db.close()
    assert main(["export", str(folder), "--output", str(tmp_path / "out.csv")]) == 0
    with open(tmp_path / "out.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    reasons = [r["reason"] for r in rows if r["reason"]]
    assert sorted(reasons) == sorted(f"'{text}" for text in FORMULAS)
    cells = [v for r in rows for v in r.values()]
    assert not any(v.startswith(("=", "+", "@", "\t", "\r")) for v in cells)
    assert all(float(r["num_clients"]) > 0 for r in rows)  # numbers stay numbers


def test_a_hard_linked_export_target_is_refused(tmp_path, capsys):
    """A hard link planted as ``results.csv`` was written through onto the user's file."""
    folder = tmp_path / "received"
    shutil.copytree(RECEIVED, folder)
    victim = tmp_path / "precious.txt"
    victim.write_text("precious")
    (folder / "results.csv").hardlink_to(victim)
    assert main(["export", str(folder)]) == 2
    assert "hard links" in capsys.readouterr().err
    assert victim.read_text() == "precious"
