import signal
import sqlite3

import pytest

import fgl_workbench.running.cell as cell_pipeline
import fgl_workbench.running.runner as runner
from fgl_workbench.errors import ConfigError
from fgl_workbench.reports.report import report_content
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.seeding import Streams, public_seed
from fgl_workbench.storage.store import ResultsStore, attack_label

RAW = {
    "name": "resume",
    "reproducible": True,
    "seeds": [0, 1],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "targets": [{"name": "fedavg", "params": {"rounds": 3}}],
    "attacks": [
        {"name": "mia-threshold", "params": {"signal": "loss"}},
        {"name": "mia-threshold", "params": {"signal": "loss", "hops": 1}},
    ],
}


def rows(out):
    db = sqlite3.connect(out / "results.sqlite")
    cells = db.execute("SELECT cell_id, utility_json, comm_json FROM cells ORDER BY 1").fetchall()
    attacks = db.execute(
        "SELECT cell_id, attack_key, status, metrics_json FROM attacks ORDER BY 1, 2"
    ).fetchall()
    return cells, attacks


def test_rerun_skips_finished_cells(tmp_path):
    suite = parse_suite(RAW)
    first = run_suite(suite, tmp_path, quiet=True)
    assert (first.cells_run, first.cells_skipped) == (2, 0)
    before = rows(tmp_path)
    second = run_suite(suite, tmp_path, quiet=True)
    assert (second.cells_run, second.cells_skipped) == (0, 2)
    assert rows(tmp_path) == before
    assert len(before[1]) == 4


def test_crash_mid_suite_loses_nothing_and_resume_equals_uninterrupted(tmp_path, monkeypatch):
    suite = parse_suite(RAW)
    calls = {"n": 0}
    real = cell_pipeline.run_attack

    def crash_on_third(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C in cell 2
        return real(*args, **kwargs)

    monkeypatch.setattr(cell_pipeline, "run_attack", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        run_suite(suite, tmp_path / "crashed", quiet=True)
    cells, attacks = rows(tmp_path / "crashed")
    assert len(attacks) == 2 and len(cells) == 2  # cell 1 complete, cell 2 trained only
    monkeypatch.setattr(cell_pipeline, "run_attack", real)
    resumed = run_suite(suite, tmp_path / "crashed", quiet=True)
    assert resumed.cells_run == 1
    run_suite(suite, tmp_path / "clean", quiet=True)
    assert rows(tmp_path / "crashed") == rows(tmp_path / "clean")


def test_same_seed_same_numbers_across_runs(tmp_path):
    suite = parse_suite({**RAW, "seeds": [4]})
    run_suite(suite, tmp_path / "a", quiet=True)
    run_suite(suite, tmp_path / "b", quiet=True)
    assert rows(tmp_path / "a") == rows(tmp_path / "b")


def test_store_keeps_roc_artifacts(tmp_path):
    run_suite(parse_suite({**RAW, "seeds": [0]}), tmp_path, quiet=True)
    store = ResultsStore(tmp_path)
    for row in store.attacks():
        fpr, tpr = store.load_roc(row.artifact)
        assert fpr[0] == 0 and fpr[-1] == 1 and tpr[-1] == 1
        assert row.metrics["members"] > 0
    cell = store.cells()[0]
    assert cell.comm["messages"] == 3 * 3 * 2
    assert cell.epsilon is None
    assert len(cell.partition) == 3


def test_cell_epsilon_comes_from_the_ledger(tmp_path, monkeypatch):
    """A target whose ledger holds DP-SGD events gets ε from the accountant, at the suite's δ."""
    from fgl_workbench.accountants import (
        ADVERSARIES,
        PrivacyLedger,
        Scope,
        SubsampledGaussian,
        epsilon,
    )
    from fgl_workbench.targets import TARGETS

    fedavg = TARGETS.get("fedavg")
    scope = Scope("record", "add or remove one record", ADVERSARIES)
    event = SubsampledGaussian(0.05, 1.2, 300, scope=scope)

    class RecordsEvents:
        name, level, Config = "dp-test", "any", fedavg.Config

        def fit(self, federation, config, defenses, seed):
            trained = fedavg.fit(federation, config, defenses, seed)
            trained.ledger = trained.ledger.record(event)
            return trained

    monkeypatch.setitem(TARGETS._items, "dp-test", RecordsEvents())
    raw = {
        **RAW,
        "reproducible": True,
        "seeds": [0],
        "delta": 1e-6,
        "attacks": [],
        "targets": [{"name": "dp-test", "params": {"rounds": 1}}],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    (cell,) = ResultsStore(tmp_path).cells()
    assert cell.epsilon == epsilon(PrivacyLedger((event,)), 1e-6).epsilon


def test_every_attack_family_member_runs_from_a_suite_and_shares_references(tmp_path, monkeypatch):
    """One cell, the whole membership suite; reference models are trained once for LiRA and
    RMIA, and the server's attack is scored per client on that client's records."""
    raw = {
        **RAW,
        "reproducible": True,
        "seeds": [0],
        "partitions": [{"method": "metis", "num_clients": 3, "aux_fraction": 0.2}],
        "attacks": [
            {"name": "mia-shadow", "params": {"hops": 1}},
            {"name": "mia-lira", "params": {"num_references": 4}},
            {"name": "mia-lira", "params": {"num_references": 4, "mode": "offline"}},
            {"name": "mia-rmia", "params": {"num_references": 4}},
            {"name": "mia-threshold", "params": {"adversary": "server"}},
        ],
    }
    trained = []
    real = cell_pipeline.ReferencePool.models

    def counting(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        trained.append(self.trained)
        return out

    monkeypatch.setattr(cell_pipeline.ReferencePool, "models", counting)
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    assert trained[-1] == 1 + 4  # one shadow, four references shared by three attacks
    store = ResultsStore(tmp_path)
    rows = store.attacks()
    assert len(rows) == 5 and all(r.status == "ok" for r in rows)
    server = next(r for r in rows if r.params.get("adversary") == "server")
    assert 0.0 <= server.metrics["client_auc_min"] <= server.metrics["client_auc_max"] <= 1.0
    for r in rows:
        assert r.metrics["auc_ci_low"] <= r.metrics["auc"] <= r.metrics["auc_ci_high"]


def test_a_defended_cell_stores_the_accountants_epsilon(tmp_path):
    from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian, epsilon

    dp = {"name": "dp-fedavg", "params": {"clip": 1.0, "noise_multiplier": 1.3}}
    raw = {
        **RAW,
        "reproducible": True,
        "seeds": [0],
        "targets": [{"name": "fedavg", "params": {"rounds": 3}, "defenses": [dp]}],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    (cell,) = ResultsStore(tmp_path).cells()
    by_hand = epsilon(PrivacyLedger((SubsampledGaussian(1.0, 1.3, 3),)), 1e-5).epsilon
    assert cell.epsilon == pytest.approx(by_hand, rel=1e-12)
    assert cell.label.endswith("fedavg+dp-fedavg/seed0")


@pytest.mark.parametrize(
    ("signum", "returncode"),
    [
        pytest.param(signal.SIGKILL, -signal.SIGKILL, marks=pytest.mark.slow),  # 24 s each
        (signal.SIGINT, 130),
    ],
)
def test_killed_mid_suite_then_rerun_equals_an_uninterrupted_run(tmp_path, signum, returncode):
    """A real process killed (SIGKILL) or interrupted (SIGINT, Ctrl-C: the CLI exits 130) while
    cells are being written: the store survives (WAL), the re-run computes only the missing
    cells, and the results equal a clean run's."""
    import os
    import subprocess
    import sys
    import time

    import yaml

    raw = {**RAW, "seeds": list(range(8))}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "workbench", "run", str(path), "--out", str(out), "--quiet"]
    # a terminal's foreground job gets Ctrl-C; a job started in the background by a shell
    # without job control (as CI may run us) inherits SIGINT ignored, and Python then keeps it
    # ignored: the child gets the default disposition back, as a user at a terminal has it
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    done = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            done = len(rows(out)[0]) if (out / "results.sqlite").exists() else 0
        except sqlite3.OperationalError:  # the store is being created
            continue
        if done >= 2:
            os.kill(proc.pid, signum)
            break
    proc.wait(timeout=30)
    assert proc.returncode == returncode, "the suite finished before it could be killed"
    assert 2 <= done < len(raw["seeds"])
    resumed = run_suite(parse_suite(raw), out, quiet=True)
    # every stored cell is skipped but the one killed between training and its attacks
    assert resumed.cells_skipped >= done - 1 and resumed.cells_run + resumed.cells_skipped == len(
        raw["seeds"]
    )
    run_suite(parse_suite(raw), tmp_path / "clean", quiet=True)
    assert rows(out) == rows(tmp_path / "clean")


def test_process_executor_equals_serial(tmp_path):
    """Whole cells in two worker processes, writing to one store: the same rows as serial."""
    suite = parse_suite({**RAW, "seeds": [0, 1, 2]})
    parallel = run_suite(suite, tmp_path / "process", quiet=True, jobs=2, executor="process")
    assert (parallel.cells_run, parallel.cells_skipped) == (3, 0)
    run_suite(suite, tmp_path / "serial", quiet=True)
    assert rows(tmp_path / "process") == rows(tmp_path / "serial")
    again = run_suite(suite, tmp_path / "process", quiet=True, jobs=2, executor="process")
    assert again.cells_run == 0


def test_jobs_must_be_positive(tmp_path):
    with pytest.raises(runner.ConfigError, match="--jobs"):
        run_suite(parse_suite(RAW), tmp_path, quiet=True, jobs=0)


def test_progress_bar_names_cells_and_quiet_silences_it(tmp_path, capsys):
    raw = {**RAW, "seeds": [0], "attacks": RAW["attacks"][:1]}
    run_suite(parse_suite(raw), tmp_path / "loud")
    err = capsys.readouterr().err
    assert "resume: 1/1 cells" in err and "done: csbm/metis-3/fedavg/seed0" in err
    run_suite(parse_suite(raw), tmp_path / "quiet", quiet=True)
    assert capsys.readouterr().err == ""


def test_attacking_a_stored_run_shows_the_same_progress_and_quiet_silences_it(tmp_path, capsys):
    raw = {**RAW, "seeds": [0], "attacks": RAW["attacks"][:1]}
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    added = runner.AttackEntry(**RAW["attacks"][1])
    assert runner.attack_stored(tmp_path, [added]) == (1, 0)
    err = capsys.readouterr().err
    assert "resume: attack: 1/1 cells" in err
    assert f"csbm/metis-3/fedavg/seed0: attack {attack_label(added.name, added.params)}" in err
    assert "done: csbm/metis-3/fedavg/seed0" in err
    other = runner.AttackEntry(name="mia-threshold", params={"signal": "loss", "hops": 2})
    assert runner.attack_stored(tmp_path, [other], quiet=True) == (1, 0)
    assert capsys.readouterr().err == ""


def test_a_cell_reports_each_stage_it_enters(tmp_path):
    from fgl_workbench.data.catalog import load_dataset

    suite = parse_suite({**RAW, "seeds": [0]})
    cell = runner.expand(suite)[0]
    stages: list[str] = []
    store = ResultsStore(tmp_path)
    dataset = load_dataset("csbm", {"num_nodes": 300}, None)
    streams = Streams.fresh()
    cell_pipeline.run_cell(
        cell, list(cell.attacks), dataset, store, streams, on_stage=stages.append
    )
    rounds = cell.target.params["rounds"]
    trained = [f"train round {k}/{rounds}" for k in range(1, rounds + 1)]
    assert stages[:2] == ["partition", "train"]
    assert [s.split(",")[0] for s in stages[2 : 2 + rounds]] == trained  # + validation accuracy
    assert "val_accuracy" in stages[2]
    assert stages[2 + rounds :] == [
        f"attack {attack_label(a.name, a.params)}" for a in cell.attacks
    ]


def test_reconstruction_families_run_from_a_suite_and_say_what_does_not_apply(tmp_path):
    """Gradient and feature inversion are scored against the truth the runner keeps; attacks
    on uploads FedAvg never sends report "not applicable" with the reason, and a client index
    beyond the federation is a config error naming the field."""
    raw = {
        **RAW,
        "reproducible": True,
        "seeds": [0],
        "targets": [{"name": "fedavg", "params": {"rounds": 2, "optimizer": "sgd", "lr": 0.5}}],
        "attacks": [
            {"name": "gradient-inversion", "params": {"structure": "none", "steps": 50}},
            {"name": "feature-inversion", "params": {"steps": 20}},
            {"name": "statistics-inversion"},
            {"name": "uploaded-label-distribution"},
        ],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    by_name = {r.attack: r for r in ResultsStore(tmp_path).attacks()}
    for name in ("gradient-inversion", "feature-inversion"):
        m = by_name[name].metrics
        assert by_name[name].status == "ok" and -1.0 <= m["cosine"] <= 1.0
        assert m["mse_baseline"] > 0
    assert "label_set_accuracy" in by_name["gradient-inversion"].metrics
    assert "mse_nearest_1pct" in by_name["feature-inversion"].metrics
    for name in ("statistics-inversion", "uploaded-label-distribution"):
        assert by_name[name].status == "not_applicable"
        assert "uploaded" in by_name[name].reason
    bad = {**raw, "attacks": [{"name": "gradient-inversion", "params": {"client": 7}}]}
    with pytest.raises(ConfigError, match="attacks.params.client"):
        run_suite(parse_suite(bad), tmp_path / "bad", quiet=True)


def test_audit_block_stores_lower_bounds_beside_the_claim_and_resumes(tmp_path, capsys):
    """A suite's ``audit:`` block audits each DP cell at its own parameters; the rows reach
    the store, ``fgl-workbench epsilon --run`` and the report; a folder run without the audit
    gets it on the next ``audit`` (the undefended cell is not retrained)."""
    from fgl_workbench.interface import api
    from fgl_workbench.interface.cli import main

    raw = {
        **RAW,
        "reproducible": True,
        "seeds": [0],
        "attacks": [],
        "targets": [
            {"name": "fedavg", "params": {"rounds": 3}},
            {
                "name": "fedavg",
                "params": {"rounds": 3, "client_fraction": 0.5},
                "defenses": [
                    {"name": "dp-fedavg", "params": {"noise_multiplier": 2.0, "mode": "central"}}
                ],
            },
        ],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    assert all(not c.audits for c in ResultsStore(tmp_path).cells())
    summary = api.audit(raw, tmp_path, canaries=100)
    assert (summary.cells_run, summary.cells_skipped) == (1, 1)  # only the DP cell
    (dp,) = [c for c in ResultsStore(tmp_path).cells() if c.audits]
    # central mode: one claim, the cell's own event against the parties who do not see the
    # sample (nothing is claimed against the server, so nothing is audited for it)
    (audit,) = dp.audits
    assert audit["adversaries"] == "clients/querier" and audit["canaries"] == 100
    assert 0 <= audit["lower_bound"] <= audit["claimed"]
    assert audit["claimed"] == pytest.approx(dp.epsilon_against("querier", {"client"}))
    again = api.audit(raw, tmp_path, canaries=100)
    assert again.cells_run == 0
    capsys.readouterr()
    assert main(["epsilon", "--run", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "against server   client  ε = inf" in out
    # both accountants, labelled: the PLD figure of the same events, at most the RDP one
    (q,) = [e for e in dp.epsilons if e["adversary"] == "querier"]
    assert 0 < q["epsilon_pld"] <= q["epsilon"]
    assert f"querier  client  ε = {q['epsilon']:.6g} RDP (PLD {q['epsilon_pld']:.6g})" in out
    assert "dp-fedavg vs clients/querier (client): ε ≥" in out
    html = api.build_report(tmp_path).read_text()
    assert "Canary audit: lower bound vs claimed ε" in html
    assert "ε (RDP)" in html and "ε (PLD)" in html


def test_an_attack_seed_leads_back_to_no_public_seed_unless_the_run_is_reproducible(
    tmp_path, monkeypatch
):
    """The old exploit: brute force over suite seeds found the one an attack's seed derived
    from, then rebuilt the partition and the DP noise. Under a run key no public seed explains
    an attack's seed, and two folders partition and train differently; a reproducible run is
    rebuilt from its seed, and the store and the report say so."""
    seen: list[int] = []
    real = cell_pipeline.seed_everything
    monkeypatch.setattr(cell_pipeline, "seed_everything", lambda s: seen.append(s) or real(s))
    raw = {**RAW, "seeds": [3], "attacks": RAW["attacks"][:1], "reproducible": False}
    key = parse_suite(raw).attacks[0].key
    for out in ("a", "b"):
        run_suite(parse_suite(raw), tmp_path / out, quiet=True)
    assert all(public_seed(s, "attack", key) not in seen for s in range(20_000))
    assert rows(tmp_path / "a")[0] != rows(tmp_path / "b")[0]
    seen.clear()
    run_suite(parse_suite({**raw, "reproducible": True}), tmp_path / "public", quiet=True)
    assert seen == [public_seed(3, "attack", key)]
    marks = [ResultsStore(tmp_path / d).meta("reproducible") for d in ("a", "public")]
    assert marks == ["0", "1"]
    intro = report_content(tmp_path / "public").sections[0].blocks[1]  # after the auditor table
    assert "Reproducible run" in intro.text
    with pytest.raises(ConfigError, match="reproducible: .* was made with reproducible: False"):
        run_suite(parse_suite({**raw, "reproducible": True}), tmp_path / "a", quiet=True)
