import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from fgl_workbench.interface.cli import main

REPO = Path(__file__).resolve().parents[3]


def test_quickstart_end_to_end(quickstart, capsys, monkeypatch):
    """`make demo`'s job: embedded data, an undefended target that leaks and DP-SGD at ε = 1
    under which no attack leaks, the store, the audit and the report; the verdict says what
    the stored metrics say, in the reading column's words, and claims no ceiling crossed
    (the audit says the accounting holds). A re-run finds everything done."""
    from fgl_workbench.reports.content import Callout
    from fgl_workbench.reports.report import report_content
    from fgl_workbench.reports.summary import chance_of, reading
    from fgl_workbench.reports.verdict import reading_sentence

    db = sqlite3.connect(quickstart / "results.sqlite")
    cells = {label: eps for label, eps in db.execute("SELECT label, epsilon FROM cells")}
    assert len(cells) == 2
    dp = next(label for label in cells if "dp-sgd" in label)
    assert cells[dp] is not None and cells[dp] <= 1.0 + 1e-6  # calibrated to target_epsilon
    rows = db.execute(
        "SELECT c.label, a.metrics_json FROM attacks a JOIN cells c USING (cell_id)"
    ).fetchall()
    assert len(rows) == 6
    metrics = {label: [json.loads(m) for lab, m in rows if lab == label] for label in cells}
    plain = next(label for label in cells if label != dp)
    # the undefended model leaks: an attack's AUC interval above 0.5, TPR well above 1 % at 1 %
    assert any(m["auc_ci_low"] > 0.5 for m in metrics[plain])
    assert max(m["tpr@0.01"] for m in metrics[plain]) > 0.03
    # under DP-SGD no attack's interval lies above 0.5
    assert all(m["auc_ci_low"] <= 0.5 for m in metrics[dp])
    audits = db.execute("SELECT lower_bound, claimed FROM audits").fetchall()
    assert audits and all(0 <= bound <= claimed for bound, claimed in audits)
    opening = report_content(quickstart).sections[0].blocks
    verdict = {b.text.split(" (seed")[0]: b for b in opening if isinstance(b, Callout)}
    # it opens with the auditor table, the undefended baseline first
    assert [row[0] for row in opening[0].rows] == [c.rsplit("/seed", 1)[0] for c in (plain, dp)]
    readings = {
        label: [
            reading((m["auc_ci_low"], m["auc_ci_high"]), chance_of([m])) for m in metrics[label]
        ]
        for label in cells
    }
    assert verdict[plain.rsplit("/seed", 1)[0]].kind == "warn"
    assert reading_sentence(readings[plain]) in verdict[plain.rsplit("/seed", 1)[0]].text
    defended = verdict[dp.rsplit("/seed", 1)[0]]
    assert reading_sentence(readings[dp]) in defended.text and "leaks" not in readings[dp]
    quiet = all(r == "at chance" for r in readings[dp])
    assert defended.kind == ("ok" if quiet else "info")
    assert "DP ceiling" not in defended.text  # the callout carries the warnings
    assert (
        f"ε = {cells[dp]:.3g} per record against the server, clients and querier" in defended.text
    )
    report = (quickstart / "report.html").read_text()
    assert "Verdict" in report and "Canary audit: lower bound vs claimed ε" in report
    assert "TPR@1% [95% CI]" in report and "nothing here contradicts the accounting" in report
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["run", str(REPO / "examples/quickstart.yaml"), "--out", str(quickstart)]) == 0
    printed = capsys.readouterr().out
    assert "0 cell(s) run, 2 already done" in printed
    # it ends with what it measured, in a 100-column terminal: utility per configuration and
    # the attack tables, configurations and attacks by short keys with a legend below
    assert max(len(line) for line in printed.splitlines() if str(quickstart) not in line) <= 100
    assert printed.count("| seed 0 |") == 2 and "A1  mia-rmia(num_references=4)" in printed


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


def test_run_states_its_thread_count_once_and_an_explicit_count_wins(tmp_path, capsys, monkeypatch):
    """By default the run sizes each cell's threads to the free cores and says so in one
    line; --threads N reaches every cell and the caller's own count comes back after."""
    import torch

    from fgl_workbench.running import cell as cell_module
    from fgl_workbench.running.threads import machine_threads

    seen = []
    original = cell_module.run_cell

    def recording(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(cell_module, "run_cell", recording)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.getloadavg", lambda: (1.0, 1.0, 1.0))  # a steady load to compare
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\nreproducible: true\nseeds: [0, 1]\n"
        "datasets: [{name: csbm, params: {num_nodes: 200}}]\n"
        "partitions: [{method: metis, num_clients: 2}]\n"
        "targets: [{name: fedavg, params: {rounds: 2}}]\n"
    )
    before = torch.get_num_threads()
    expected = machine_threads(None, "serial", 1).describe()
    assert main(["run", str(suite), "--out", str(tmp_path / "a")]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("intra-op threads")]
    assert lines == [expected]
    assert seen == [machine_threads(None, "serial", 1).per_cell] * 2
    seen.clear()
    assert main(["run", str(suite), "--out", str(tmp_path / "b"), "--threads", "3"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("intra-op threads")]
    assert lines == ["intra-op threads: 3 per cell (as asked; --threads N to change)"]
    assert seen == [3, 3] and torch.get_num_threads() == before
    assert main(["run", str(suite), "--out", str(tmp_path / "c"), "--threads", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --threads: expected a whole number >= 1")
