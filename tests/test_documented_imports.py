"""Every import a document shows (README, docs/, examples' READMEs: in its Python blocks, and
one-line ``from fgl_workbench... import ...`` in prose or shell commands) names a module and
attributes that exist under the one namespace: a reader who copies it gets no ImportError."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([REPO / "README.md", *REPO.glob("docs/*.md"), *REPO.glob("examples/**/*.md")])
ONE_LINE = re.compile(r"from (fgl_workbench[\w.]*) import ([\w, ]+)")
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def documented_imports() -> list[tuple[str, str, list[str]]]:
    """(where, module, names) of every import of ours the documents show."""
    found = []
    for doc in DOCUMENTS:
        text = doc.read_text()
        name = doc.relative_to(REPO)
        for i, line in enumerate(text.splitlines(), 1):
            for module, names in ONE_LINE.findall(line):
                found.append((f"{name}:{i}", module, names.split(",")))
        for block in PYTHON_BLOCK.findall(text):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and node.module.startswith("fgl_workbench"):
                    names = [a.name for a in node.names]
                    found.append((f"{name} (python block)", node.module, names))
    return found


@pytest.mark.parametrize(("where", "module", "names"), documented_imports())
def test_a_documented_import_resolves(where, module, names):
    imported = importlib.import_module(module)
    missing = [n.strip() for n in names if n.strip() and not hasattr(imported, n.strip())]
    assert missing == [], f"{where}: {module} has no {missing}"
