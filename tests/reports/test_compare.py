"""Several results folders in one report: each folder's configurations kept apart and named,
verdicts measured against the twin in the same folder, the comparison written where asked."""

import shutil
from pathlib import Path

import pytest

from fgl_workbench.interface import cli
from fgl_workbench.reports.report import load_results, report_content
from fgl_workbench.reports.summary import configurations


@pytest.fixture(scope="module")
def two_folders(dp_report, tmp_path_factory):
    """The same results twice under other names: the same cell ids and labels in both."""
    root = tmp_path_factory.mktemp("compare")
    first, second = root / "baseline", root / "candidate"
    shutil.copytree(Path(dp_report).parent, first)
    shutil.copytree(Path(dp_report).parent, second)
    return first, second


def test_the_same_suite_in_two_folders_makes_two_configurations_each(two_folders):
    single = load_results([two_folders[0]])
    both = load_results(list(two_folders))
    assert len(both.cells) == 2 * len(single.cells)
    assert len({c.cell_id for c in both.cells}) == len(both.cells)  # ids kept apart
    labels = [label for label, _ in configurations(both.cells)]
    assert len(labels) == 2 * len(configurations(single.cells))
    assert all(label.endswith(("[results=baseline]", "[results=candidate]")) for label in labels)
    assert set(both.rocs) == {(a.cell_id, a.attack_key) for a in both.attacks if a.artifact}


def test_each_verdict_compares_with_its_own_folders_twin(two_folders):
    report = report_content(list(two_folders))
    callouts = [b.text for b in report.sections[0].blocks if hasattr(b, "kind")]
    assert len(callouts) == 4
    for folder in ("baseline", "candidate"):
        defended = next(t for t in callouts if "dp-fedavg" in t and folder in t)
        plain = next(t for t in callouts if "dp-fedavg" not in t and folder in t)
        accuracy = plain.split("Accuracy ")[1].split("%")[0]
        assert f"against {accuracy}% undefended" in defended
    assert report.title == "fgl-workbench report: comparing dp, dp"


def test_the_cli_writes_the_comparison_where_asked(two_folders, tmp_path, capsys):
    out = tmp_path / "comparison"
    assert cli.main(["report", *map(str, two_folders), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "results=baseline" in page and "results=candidate" in page
    assert "Compares 2 results folders" in page
    assert not (two_folders[0] / "comparison").exists()
    assert cli.main(["report", *map(str, two_folders)]) == 2
    assert "name where it goes with --out" in capsys.readouterr().err
