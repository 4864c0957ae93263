"""A results folder written before the one namespace still reads: ``before_issue_42/folder``
was written by commit 8f63608 (``workbench.api.run_suite`` on ``suite.json``'s suite, with the
top-level ``workbench``/``defenses`` packages), and ``attacked_metrics.json`` holds what that
commit's ``api.attack`` then stored for ``suite.json``'s attacks. Its snapshots name their
types by the old modules (``workbench.models:ModelSpec``, ``defenses.metric_dp:...``). The
graph-reconstruction rows were stored again on 2026-11-27, when the link challenge's
non-edges were matched in degree on purpose (an endpoint's count in the list gave edges away),
and again the same day when they became the edges' twin images, named by pseudonyms (the
list's triangles and the dataset's numbering gave edges away); the membership rows are still
8f63608's."""

import json
import shutil
from pathlib import Path

from fgl_workbench.attacks import ATTACKS
from fgl_workbench.interface import api
from fgl_workbench.storage.store import ResultsStore

HERE = Path(__file__).with_name("before_issue_42")


def test_attacks_on_a_folder_written_before_the_rename_give_the_numbers_they_gave_then(
    tmp_path, assert_same
):
    folder = tmp_path / "folder"
    shutil.copytree(HERE / "folder", folder)
    attacks = json.loads((HERE / "suite.json").read_text())["attacks"]
    assert api.attack(folder, attacks) == (3, 0)
    expected = json.loads((HERE / "attacked_metrics.json").read_text())
    rows = ResultsStore(folder).attacks()
    found = {f"{r.cell_id}/{r.attack_key}": [r.status, r.metrics] for r in rows}
    assert found.keys() == expected.keys()
    for r in rows:  # what changed since, on purpose: link rows state no ε bound (not a game)
        status, metrics = expected[f"{r.cell_id}/{r.attack_key}"]
        if metrics is not None and ATTACKS.get(r.attack).family == "link":
            metrics |= {"epsilon_lb": None, "epsilon_lb_ceiling": None}
    assert_same(found, expected)
