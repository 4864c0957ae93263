"""What ``report`` writes goes through a temporary file and a rename: a planted hard link is
refused, never written through onto the file it shares."""

from __future__ import annotations

import shutil
from pathlib import Path

from fgl_workbench.interface.cli import main

RECEIVED = Path(__file__).parents[1] / "workbench" / "storage" / "before_issue_42" / "folder"


def test_hard_linked_report_outputs_are_refused(tmp_path, capsys):
    folder = tmp_path / "received"
    shutil.copytree(RECEIVED, folder)
    victim = tmp_path / "precious.txt"
    victim.write_text("precious")
    (tmp_path / "tradeoff.png").hardlink_to(victim)
    assert main(["report", str(folder), "--tradeoff-png", str(tmp_path / "tradeoff.png")]) == 2
    assert "tradeoff.png: has 2 hard links" in capsys.readouterr().err
    (folder / "report.html").unlink()  # written whole before the figure was refused
    (folder / "report.html").hardlink_to(victim)
    assert main(["report", str(folder)]) == 2
    assert "report.html: has 3 hard links" in capsys.readouterr().err
    assert victim.read_text() == "precious"
