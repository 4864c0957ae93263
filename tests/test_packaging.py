"""One namespace (issue 42): the wheel installs ``fgl_workbench`` and nothing else at the top
level, with every package folder of the repository and the report's templates, and the
installed project has no ``attacks``, ``workbench``, ... of its own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
FOLDERS = PYPROJECT["tool"]["setuptools"]["package-dir"]  # package → repository folder
BUILD_LEFTOVERS = shutil.ignore_patterns(
    ".venv", ".git", "build", "*.egg-info", "runs", "tests", "__pycache__", ".*_cache"
)


def package_folders() -> set[str]:
    """Every package of the source tree, as its path inside the wheel."""
    found = set()
    for package, folder in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            inside = init.parent.relative_to(REPO / folder).parts
            found.add("/".join([*package.split("."), *inside]))
    return found


def test_the_wheel_holds_only_fgl_workbench(tmp_path):
    # a clean copy: a build/ folder left by an earlier build would add stale modules
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=BUILD_LEFTOVERS)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    command += ["--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(source)]
    subprocess.run(command, check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = f"fgl_workbench-{PYPROJECT['project']['version']}.dist-info"
    assert {n.split("/")[0] for n in names} == {"fgl_workbench", dist_info}
    assert package_folders() <= {n.rsplit("/", 1)[0] for n in names if n.endswith(".py")}
    templates = {p.name for p in (REPO / "reports" / "templates").iterdir()}
    assert templates <= {Path(n).name for n in names if "/reports/templates/" in n}
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "fgl-workbench = fgl_workbench.interface.cli:main" in entry_points


def test_the_installed_project_has_no_former_top_level_names(tmp_path):
    """Outside the repository (whose folders Python would otherwise find from its working
    directory) only ``fgl_workbench`` imports."""
    former = list(FOLDERS.values())
    probe = "import importlib.util as u, sys; print([n for n in sys.argv[1:] if u.find_spec(n)])"
    found = subprocess.run(
        [sys.executable, "-c", probe, *former, "fgl_workbench.attacks"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert found.strip() == "['fgl_workbench.attacks']"
