import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from workbench.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_quickstart_end_to_end(tmp_path, capsys):
    """`make demo`'s job: embedded data, both levels, attacks, store and report."""
    out = tmp_path / "qs"
    assert main(["run", str(REPO / "examples/quickstart.yaml"), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "4 cell(s) run" in printed and "report.html" in printed
    # it ends with what it measured: utility per configuration and the attack tables
    assert printed.count("seeds=0") == 4 and "accuracy=" in printed
    assert "mia-threshold" in printed and any(line.startswith("| ") for line in printed.split("\n"))
    db = sqlite3.connect(out / "results.sqlite")
    eps = sorted(e is None for (e,) in db.execute("SELECT epsilon FROM cells"))
    assert eps == [False, False, True, True]  # the DP-FedAvg cells carry their ε
    metrics = [json.loads(m) for (m,) in db.execute("SELECT metrics_json FROM attacks")]
    assert len(metrics) == 20 and all(0 <= m["auc"] <= 1 for m in metrics)
    report = (out / "report.html").read_text()
    assert len(report) > 10_000 and "Privacy–utility" in report
    # its audit block: each DP cell's canary-audit bounds beside the claims, in the report
    audits = db.execute("SELECT adversaries, lower_bound, claimed FROM audits").fetchall()
    assert len(audits) == 2 and all(0 <= bound <= claimed for _, bound, claimed in audits)
    assert "Canary audit: lower bound vs claimed ε" in report
    assert main(["run", str(REPO / "examples/quickstart.yaml"), "--out", str(out), "--quiet"]) == 0
    assert "0 cell(s) run, 4 already done" in capsys.readouterr().out


def test_cora_example_on_real_data(tmp_path, data_root):
    out = tmp_path / "cora"
    argv = [
        "run",
        str(REPO / "examples/cora-fedavg.yaml"),
        "--out",
        str(out),
        "--quiet",
        "--data-root",
        str(data_root),
    ]
    assert main(argv) == 0
    db = sqlite3.connect(out / "results.sqlite")
    (utility,) = db.execute("SELECT utility_json FROM cells").fetchone()
    assert json.loads(utility)["accuracy"] > 0.65
    aucs = [json.loads(m)["auc"] for (m,) in db.execute("SELECT metrics_json FROM attacks")]
    assert len(aucs) == 3 and all(a > 0.5 for a in aucs)


def test_bad_suite_prints_one_line_error_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\ndatasets: [{name: csbm}]\npartitions: [{method: louvain, num_clients: 2}]\n"
        "targets: [{name: fedavg, params: {rounds: -1}}]\n"
    )
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "targets[0].params.rounds" in err
    assert "Traceback" not in err


def test_report_of_missing_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no results store" in capsys.readouterr().err


def test_list(capsys):
    assert main(["list", "datasets"]) == 0
    out = capsys.readouterr().out
    assert "Cora (node)" in out and "PROTEINS (graph)" in out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for section in ("targets:", "attacks:", "datasets:", "partitioners:"):
        assert section in out
    assert "mia-threshold (adversary: querier, server)" in out and "louvain (node)" in out
    assert "dp-fedavg (stage: aggregation)" in out


def test_python_dash_m_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "list", "targets"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "fedavg" in proc.stdout


def test_dry_run_lists_cells_and_what_is_done(tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\nreproducible: true\nseeds: [0, 1]\n"
        "datasets: [{name: csbm, params: {num_nodes: 200}}]\n"
        "partitions: [{method: metis, num_clients: 2}]\n"
        "targets:\n  - name: fedavg\n    params: {rounds: 2}\n"
        "    defenses: [{name: dp-fedavg}]\n"
        "    sweep:\n      defenses[0].params.noise_multiplier: [0.5, 2.0]\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(suite), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == f"4 cell(s) × 0 attack(s): 4 to run, 0 already in {out}"
    assert all(line.startswith("todo  csbm/metis-2/fedavg+dp-fedavg/seed") for line in printed[:-1])
    assert '"noise_multiplier": 2.0' in printed[2] and not out.exists()  # nothing ran
    assert main(["run", str(suite), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", str(suite), "--out", str(out), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(": 0 to run, 4 already in " + str(out))
