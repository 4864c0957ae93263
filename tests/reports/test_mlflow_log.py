"""Logging a results folder to MLflow: a run per cell holding the store's numbers, read back
from a real local file store; logging again adds to those runs instead of making new ones."""

import math
import shutil
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main
from fgl_workbench.reports.mlflow_log import attack_prefixes, connect, log_results, mlflow_key
from fgl_workbench.storage.store import AttackRow, CellRow, ResultsStore

DP_CONFIG = {
    "dataset": {"name": "csbm", "params": {"num_nodes": 300}},
    "partition": {
        "method": "louvain",
        "num_clients": 3,
        "params": {},
        "split": [0.2, 0.4, 0.4],
        "aux_fraction": 0.1,
    },
    "target": {
        "name": "fedavg",
        "params": {"rounds": 3, "model": {"arch": "gcn"}},
        "defenses": [{"name": "dp-fedavg", "params": {"noise_multiplier": 1.1, "mode": "central"}}],
    },
    "seed": 0,
}
PLAIN_CONFIG = {**DP_CONFIG, "target": {"name": "fedavg", "params": {"rounds": 3}}, "seed": 1}
DP_ID, PLAIN_ID = "a" * 16, "b" * 16


COMM = {"rounds": 3, "bytes": {"up": 0, "down": 0}}
PLAIN_UTILITY = {"accuracy": 0.9, "macro_f1": None}


def _cell(cell_id, label, config, utility, epsilons=(), history=()):
    return CellRow(
        cell_id, label, config, utility, COMM, [], None, 0.1, 0.2, epsilons, history=history
    )


# three rounds: the first's validation not read (NaN), no loss measured in the last
HISTORY = (
    {"round": 0, "train_loss": 1.25, "val_accuracy": math.nan},
    {"round": 1, "train_loss": 1.0, "val_accuracy": 0.5},
    {"round": 2, "val_accuracy": 0.75},
)
REPORT = "<html>the folder's report</html>"


def _attack(cell_id, name, params, status="ok", reason=None, metrics=None, key=None):
    key = key or f"{name}-{len(params)}"
    return AttackRow(cell_id, key, name, params, status, reason, metrics, None, 0.3)


@pytest.fixture
def folder(tmp_path):
    """A results folder written row by row: a DP cell (ε = ∞ against the server, attack
    metrics that are None, NaN or nested, an attack that did not apply, a training history)
    and a plain one, with its report."""
    store = ResultsStore(tmp_path / "results")
    store.set_meta("suite_name", "tiny")
    eps = [
        {"adversary": "querier", "unit": "client", "epsilon": 2.5, "delta": 1e-5, "note": "x"},
        {"adversary": "server", "unit": "client", "epsilon": math.inf, "delta": 1e-5, "note": "y"},
    ]
    utility = {"accuracy": 0.75, "macro_f1": 0.5, "per_client": [0.7, 0.8], "auc": None}
    dp = _cell(DP_ID, "csbm/louvain-3/fedavg+dp-fedavg/seed0", DP_CONFIG, utility, eps, HISTORY)
    store.put_cell(dp, "f" * 64)
    store.put_cell(
        _cell(PLAIN_ID, "csbm/louvain-3/fedavg/seed1", PLAIN_CONFIG, PLAIN_UTILITY),
        "e" * 64,
    )
    metrics = {"auc": 0.61, "tpr@0.01": 0.03, "tpr@0.001": None, "epsilon_lb": 0.4}
    metrics |= {"per_client": [0.5, 0.6], "spread": math.nan, "members": 48}
    store.put_attack(
        _attack(DP_ID, "mia-threshold", {"hops": 2, "signal": "loss"}, metrics=metrics), "h"
    )
    reason = "the target serves no posteriors to its clients"
    store.put_attack(_attack(DP_ID, "link-stealing", {}, "not_applicable", reason), "h")
    store.close()
    (tmp_path / "results" / "report.html").write_text(REPORT)
    return tmp_path / "results"


@pytest.fixture
def uri(tmp_path, monkeypatch):
    """A local file store: MLflow 3 opens it only on request."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return (tmp_path / "mlruns").as_uri()


def _runs(uri, experiment):
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id])
    return client, {r.data.tags["fgl_workbench.cell_id"]: r for r in runs}


def test_a_run_per_cell_with_the_stores_numbers(folder, uri):
    logged = log_results(folder, connect(uri))
    assert (logged.experiment, logged.created, logged.updated) == ("tiny", 2, 0)
    _, runs = _runs(uri, "tiny")
    assert set(runs) == {DP_ID, PLAIN_ID}
    dp = runs[DP_ID]
    assert dp.info.run_name == "csbm/louvain-3/fedavg+dp-fedavg/seed0"
    assert dp.info.status == "FINISHED"
    assert dp.data.params == {
        "dataset.name": "csbm",
        "dataset.params.num_nodes": "300",
        "partition.method": "louvain",
        "partition.num_clients": "3",
        "partition.split": "[0.2, 0.4, 0.4]",
        "partition.aux_fraction": "0.1",
        "target.name": "fedavg",
        "target.params.rounds": "3",
        "target.params.model.arch": "gcn",
        "target.defenses.0.name": "dp-fedavg",
        "target.defenses.0.params.noise_multiplier": "1.1",
        "target.defenses.0.params.mode": "central",
        "seed": "0",
        "config_hash": "f" * 64,
    }
    # every finite number exactly; None, NaN, ∞ and nested values are no metric
    mia = "mia-threshold_hops_2_signal_loss"
    assert dp.data.metrics == {
        "utility.accuracy": 0.75,
        "utility.macro_f1": 0.5,
        "epsilon.querier.client": 2.5,
        f"{mia}.auc": 0.61,
        f"{mia}.tpr_at_0.01": 0.03,
        f"{mia}.epsilon_lb": 0.4,
        f"{mia}.members": 48.0,
        "history.train_loss": 1.0,  # each per-round metric at its last step
        "history.val_accuracy": 0.75,
    }
    tags = dp.data.tags
    assert tags["epsilon.server.client"] == "inf" and tags[f"{mia}.spread"] == "nan"
    assert tags[f"{mia}.label"] == "mia-threshold(hops=2, signal=loss)"
    assert tags["link-stealing.not_applicable"] == "the target serves no posteriors to its clients"
    assert "link-stealing.label" in tags and not any(k.startswith("link") for k in dp.data.metrics)
    assert tags["fgl_workbench.results_folder"] == str(folder.resolve())
    assert tags["fgl_workbench.running.suite"] == "tiny"
    plain = runs[PLAIN_ID]
    assert plain.data.metrics == {"utility.accuracy": 0.9}
    assert "target.defenses.0.name" not in plain.data.params and plain.data.params["seed"] == "1"


def test_the_training_history_is_logged_per_round_and_the_report_beside(folder, uri, tmp_path):
    """Each round's numbers at step = round (NaN left out), once however often the folder is
    logged; the folder's report in every run."""
    log_results(folder, connect(uri))
    log_results(folder, connect(uri))
    client, runs = _runs(uri, "tiny")
    dp = runs[DP_ID].info.run_id

    def curve(key):
        return [(m.step, m.value) for m in client.get_metric_history(dp, key)]

    assert curve("history.train_loss") == [(0, 1.25), (1, 1.0)]
    assert curve("history.val_accuracy") == [(1, 0.5), (2, 0.75)]
    assert not any(k.startswith("history.") for k in runs[PLAIN_ID].data.metrics)
    for run in runs.values():
        assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["report.html"]
        got = client.download_artifacts(run.info.run_id, "report.html", str(tmp_path))
        assert Path(got).read_text() == REPORT


def test_logging_again_updates_the_runs_it_made(folder, uri, tmp_path):
    log_results(folder, connect(uri), "again")
    logged = log_results(folder, connect(uri), "again")
    assert (logged.created, logged.updated) == (0, 2)
    client, runs = _runs(uri, "again")
    assert len(runs) == 2 and len(client.search_runs([runs[DP_ID].info.experiment_id])) == 2
    # nothing logged twice: each metric's history holds its one value
    assert len(client.get_metric_history(runs[DP_ID].info.run_id, "utility.accuracy")) == 1
    # an attack run later joins the cell's run
    store = ResultsStore(folder, create=False)
    later = _attack(PLAIN_ID, "mia-lira", {"num_references": 4}, metrics={"auc": 0.7})
    store.put_attack(later, "h")
    store.close()
    assert log_results(folder, connect(uri), "again").created == 0
    client, runs = _runs(uri, "again")
    assert len(client.search_runs([runs[DP_ID].info.experiment_id])) == 2
    assert runs[PLAIN_ID].data.metrics == {
        "utility.accuracy": 0.9,
        "mia-lira_num_references_4.auc": 0.7,
    }
    # the same cells in another folder (other draws) are runs of their own
    shutil.copytree(folder, tmp_path / "copy")
    assert log_results(tmp_path / "copy", connect(uri), "again").created == 2


def test_keys_keep_to_mlflows_set_and_length():
    assert mlflow_key("mia-threshold(hops=2, signal=loss).tpr@0.01") == (
        "mia-threshold_hops_2_signal_loss_.tpr_at_0.01"
    )
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(mlflow_key(long_a)) == 250 and mlflow_key(long_a) != mlflow_key(long_b)
    # two labels that read the same in MLflow's set keep apart by their store keys
    twins = [
        _attack(DP_ID, "a", {"p": "x y"}, key="a-11111111"),
        _attack(DP_ID, "a", {"p": "x,y"}, key="a-22222222"),
        _attack(DP_ID, "b", {}),
    ]
    assert mlflow_key(twins[0].label) == mlflow_key(twins[1].label) == "a_p_x_y"
    assert attack_prefixes(twins) == ["a-11111111", "a-22222222", "b"]


SUITE = """
name: mlflow-e2e
reproducible: true
datasets: [{name: csbm, params: {num_nodes: 300}}]
partitions: [{method: louvain, num_clients: 3}]
targets: [{name: fedavg, params: {rounds: 2}, defenses: [{name: dp-fedavg}]}]
attacks: [{name: mia-threshold}]
"""


def test_run_and_attack_log_every_cell_from_the_command_line(tmp_path, uri, capsys):
    suite, out = tmp_path / "suite.yaml", tmp_path / "out"
    suite.write_text(SUITE)
    assert main(["run", str(suite), "--out", str(out), "--quiet", "--mlflow", uri]) == 0
    assert (
        "mlflow: 1 run(s) created, 0 updated in experiment 'mlflow-e2e'" in capsys.readouterr().out
    )
    store = ResultsStore(out, create=False)
    (cell,), (attack,) = store.cells(), store.attacks()
    store.close()
    _, runs = _runs(uri, "mlflow-e2e")
    run = runs[cell.cell_id]
    metrics, tags = run.data.metrics, run.data.tags
    assert run.info.run_name == cell.label and run.data.params["seed"] == "0"
    assert run.data.params["target.defenses.0.name"] == "dp-fedavg"
    utility = {f"utility.{k}": v for k, v in cell.utility.items() if isinstance(v, float)}
    assert "utility.accuracy" in utility and all(metrics[k] == v for k, v in utility.items())
    scores = {k.replace("@", "_at_"): v for k, v in attack.metrics.items()}
    scores = {f"mia-threshold.{k}": v for k, v in scores.items() if isinstance(v, float)}
    assert "mia-threshold.auc" in scores and all(metrics[k] == v for k, v in scores.items())
    eps = {f"epsilon.{e['adversary']}.{e['unit']}": e["epsilon"] for e in cell.epsilons}
    assert metrics["epsilon.querier.client"] == eps["epsilon.querier.client"] < math.inf
    assert eps["epsilon.server.client"] == math.inf and tags["epsilon.server.client"] == "inf"

    argv = ["attack", str(out), "--attack", "mia-threshold", "--params", '{"signal": "entropy"}']
    assert main([*argv, "--mlflow", uri]) == 0
    assert "mlflow: 0 run(s) created, 1 updated" in capsys.readouterr().out
    store = ResultsStore(out, create=False)
    added = next(a for a in store.attacks() if a.params)
    store.close()
    _, runs = _runs(uri, "mlflow-e2e")
    assert len(runs) == 1
    assert (
        runs[cell.cell_id].data.metrics["mia-threshold_signal_entropy.auc"] == added.metrics["auc"]
    )


def test_a_missing_mlflow_stops_before_training(tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` fails, as uninstalled
    suite, out = tmp_path / "suite.yaml", tmp_path / "out"
    suite.write_text(SUITE)
    assert main(["run", str(suite), "--out", str(out), "--mlflow", "file:///tmp/x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --mlflow: MLflow is not installed; install the extra with "
        "`pip install 'fgl-workbench[mlflow]'`\n"
    )
    assert not out.exists()  # nothing trained, nothing written


def test_stores_mlflow_cannot_open_are_one_line_errors(folder, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    argv = ["attack", str(folder), "--attack", "mia-threshold"]
    assert main([*argv, "--mlflow", (tmp_path / "m").as_uri()]) == 2
    assert "MLFLOW_ALLOW_FILE_STORE=true" in capsys.readouterr().err
    assert main([*argv, "--mlflow", "nosuch://x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --mlflow nosuch://x: this MLflow has no store for that scheme")
    assert main([*argv, "--mlflow-experiment", "e"]) == 2
    assert "--mlflow-experiment: needs --mlflow URI" in capsys.readouterr().err
    assert main([*argv, "--mlflow", " "]) == 2
    assert "--mlflow: expected a tracking URI" in capsys.readouterr().err
    assert main([*argv, "--mlflow", "file:///x", "--mlflow-experiment", ""]) == 2
    assert "--mlflow-experiment: expected a name" in capsys.readouterr().err


def test_a_folder_without_its_report_has_it_built_and_logged(dp_report, uri, tmp_path):
    """``api.log_mlflow`` on a real run whose report was never built: built, then logged
    with each cell's training curve (FedAvg's loss every round)."""
    folder = tmp_path / "dp"
    shutil.copytree(dp_report.parent, folder)
    (folder / "report.html").unlink()
    assert api.log_mlflow(folder, uri).created == 2
    assert (folder / "report.html").is_file()
    client, runs = _runs(uri, "dp")
    for run in runs.values():
        run_id = run.info.run_id
        assert [a.path for a in client.list_artifacts(run_id)] == ["report.html"]
        steps = [m.step for m in client.get_metric_history(run_id, "history.train_loss")]
        assert sorted(steps) == [0, 1, 2]
