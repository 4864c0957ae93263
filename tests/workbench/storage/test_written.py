"""Outputs are written whole through a temporary file and a rename, never through a link."""

from __future__ import annotations

import pytest

from fgl_workbench.errors import ConfigError
from fgl_workbench.storage.store import written


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    """A reader failing half-way used to leave a truncated file behind."""
    (tmp_path / "report.html").write_text("the previous report")
    with pytest.raises(RuntimeError), written(tmp_path, "report.html") as f:
        f.write(b"half of")
        raise RuntimeError("failed half-way")
    assert (tmp_path / "report.html").read_text() == "the previous report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left


def test_a_hard_linked_target_is_refused(tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("precious")
    (tmp_path / "report.html").hardlink_to(victim)
    refused = pytest.raises(ConfigError, match="report.html: has 2 hard links")
    with refused, written(tmp_path, "report.html") as f:
        f.write(b"overwritten")
    assert victim.read_text() == "precious"


def test_a_folder_as_the_target_is_one_line(tmp_path):
    (tmp_path / "out.csv").mkdir()
    with pytest.raises(ConfigError, match="out.csv: a folder"), written(tmp_path, "out.csv"):
        pass
