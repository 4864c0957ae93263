"""A received results folder to craft: a copy of a real one (three cells with snapshots)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from crafting import RECEIVED


@pytest.fixture
def received(tmp_path: Path) -> Path:
    """A copy of a real results folder, ours to tamper with."""
    folder = tmp_path / "received"
    shutil.copytree(RECEIVED, folder)
    return folder
