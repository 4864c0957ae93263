"""Third-party attacks run in a worker process: a plug-in searching the garbage collector and
the stack for the trained target or the federation finds them in the runner's process and
nothing in its worker, and its results are stored like any other attack's."""

import json
import sqlite3

from snoop_attack import reachable_secrets
from test_runner import RAW

from fgl_workbench.running.isolated import isolated
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite

PLUGIN = "snoop_attack:Snoop"


def test_a_plugin_finds_nothing_of_the_runner_from_its_worker(tmp_path, small_csbm):
    from fgl_workbench.data.federation import build_federation
    from fgl_workbench.data.partition import make_partition

    federation = build_federation(small_csbm, make_partition(small_csbm, "louvain", 2, seed=0))
    assert reachable_secrets() > 0  # in this process the snoop would find the federation
    del federation
    raw = {**RAW, "seeds": [0], "attacks": [{"name": PLUGIN}]}
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    assert isolated(PLUGIN) and not isolated("mia-threshold")
    db = sqlite3.connect(tmp_path / "results.sqlite")
    ((status, metrics),) = db.execute("SELECT status, metrics_json FROM attacks").fetchall()
    assert status == "ok"
    assert json.loads(metrics)["attack_secrets_reachable"] == 0.0
