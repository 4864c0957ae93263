"""Every Python example of docs/guide.md runs as printed, against the quickstart's results
folder where it names one: an example that no longer works fails here, not for a reader."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "guide.md"
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
BLOCKS = PYTHON_BLOCK.findall(GUIDE.read_text())


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block {i}" for i in range(len(BLOCKS))])
def test_a_guide_example_runs(block, quickstart, tmp_path, monkeypatch):
    # the examples run from the repository's root, after `make demo` wrote runs/quickstart
    shutil.copytree(quickstart, tmp_path / "runs" / "quickstart")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(GUIDE), "exec"), {})
