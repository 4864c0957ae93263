"""The import direction docs/design.md's package map states, enforced on the source: every
module of ``fgl_workbench`` is parsed with ``ast`` (nothing is imported) and each import of
ours must go to its own part or one the map lets it import. Imports inside functions and
``if TYPE_CHECKING:`` blocks count: a rule is about what a part knows of, not when."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "docs" / "design.md"
# the repository's folders and the package each installs as
FOLDERS = {
    folder: package
    for package, folder in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["package-dir"].items()
}
FORMER = set(FOLDERS)  # the top-level names installed before the one namespace (issue 42)
ROW = re.compile(r"^\| `([\w]+)` \| (.*) \| (.*) \|$")


def package_map(text: str) -> tuple[dict[str, set[str]], set[str]]:
    """The map's rows (part → the parts it may import) and the shared row's module names."""
    allowed: dict[str, set[str]] = {}
    shared: set[str] = set()
    for line in text.split("## Package map", 1)[1].split("\n## ", 1)[0].splitlines():
        row = ROW.match(line)
        if row is None:
            continue
        part, job, may = row.groups()
        allowed[part] = {p.strip() for p in may.split(",")} - {"nothing", "nothing else"}
        if part == "shared":
            shared = set(re.findall(r"`(\w+)`", job))
    return allowed, shared


def modules() -> dict[str, Path]:
    """Every module of ours by its installed name."""
    found = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def part_of(module: str, parts: set[str], shared: set[str]) -> str | None:
    """The map's part a module belongs to (None: no row places it)."""
    names = module.split(".")
    if len(names) == 1:
        return "shared"  # fgl_workbench/__init__.py: the version
    if names[1] in parts:
        return names[1]
    return "shared" if names[1] in shared else None


def imports(path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, a ``from X import name`` of a module
    counted as that module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((node.lineno, sub if sub in known else node.module))
    return found


def violations(text: str) -> list[str]:
    allowed, shared = package_map(text)
    found = modules()
    wrong = []
    for module, path in found.items():
        part = part_of(module, set(allowed), shared)
        if part is None:
            wrong.append(f"{module}: no row of the package map places it")
            continue
        for line, target in imports(path, set(found)):
            if not target.startswith("fgl_workbench"):
                continue
            other = part_of(target, set(allowed), shared)
            if other != part and other not in allowed[part]:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {part} imports {target} ({other})")
    return wrong


def test_every_import_follows_the_package_map():
    assert violations(MAP.read_text()) == []


def test_the_map_has_teeth():
    """A map that forbids an import the code makes, or leaves a loose module out, fails."""
    text = MAP.read_text()
    stricter = text.replace(
        "| accountants, shared, data, models, defenses, targets, adversary |",
        "| accountants, shared, data, models, defenses, targets |",
    )
    assert stricter != text
    assert any("attacks imports fgl_workbench.adversary" in v for v in violations(stricter))
    loose = text.replace("`progress`, ", "")
    assert loose != text
    assert "fgl_workbench.progress: no row of the package map places it" in violations(loose)


def sources() -> list[Path]:
    """Every file of the repository but virtual environments (whatever their name), build and
    VCS folders."""
    skip = {"build", ".git", "runs", "__pycache__", ".pytest_cache", ".ruff_cache"}
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [
            d
            for d in dirs
            if d not in skip
            and not d.endswith(".egg-info")
            and not (Path(root) / d / "pyvenv.cfg").exists()
        ]
        found += [Path(root) / f for f in files]
    return found


def test_nothing_imports_a_former_top_level_name():
    """Since issue 42 only ``fgl_workbench`` is installed: no code, test, benchmark, example or
    document imports ``workbench``, ``attacks``, ... at the top level any more."""
    names = "|".join(sorted(FORMER))
    code = re.compile(rf"(^\s*|`)(from|import) ({names})\b|python -m ({names})\b|\"({names})\.")
    wrong = []
    for path in sources():
        if path.suffix == ".py":
            lines = [line for line, m in imports(path, set()) if m.split(".")[0] in FORMER]
        elif path.suffix in {".md", ".toml", ".yaml", ".txt"}:
            text = path.read_text().splitlines()
            lines = [i for i, t in enumerate(text, 1) if code.search(t)]
        else:
            continue
        wrong += [f"{path.relative_to(REPO)}:{line}" for line in lines]
    assert wrong == []
