"""Attacks on a finished run without retraining: the trained target is stored as plain data,
read back with weights_only=True, and an attack run later gives the numbers it gives in the
run itself; what a snapshot cannot hold is reported, not guessed."""

import io
import json
import pickle

import numpy as np
import pytest
import torch

from fgl_workbench.errors import ConfigError
from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.storage.snapshot import (
    SnapshotError,
    plain,
    restore,
    spec_data,
    spec_from,
    unplain,
)
from fgl_workbench.storage.store import ResultsStore

OPFGL = {
    "mode": "stage1",
    "surrogate": {"iterations": 30},
    "stage1": {"epochs": 20, "eval_every": 10, "lr": 0.01},
}
BASE = {
    "name": "offline",
    "reproducible": True,
    "seeds": [0],
    "keep_client_secrets": True,  # the curious client's key, for its attacks offline
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "targets": [
        {"name": "fedavg", "params": {"rounds": 2}},
        # personalised deployments: each client's fine-tuned model answers for its nodes
        {
            "name": "fedavg",
            "params": {"rounds": 2, "fine_tune": {"lr": 0.01, "epochs": 20, "eval_every": 2}},
        },
        {"name": "gap", "params": {"encoder_rounds": 2, "rounds": 2}},
        {"name": "opfgl", "params": OPFGL, "defenses": [{"name": "masked-aggregation"}]},
        # the clients' CKKS key is kept: a curious client decrypts offline too
        {"name": "opfgl", "params": OPFGL, "defenses": [{"name": "secure-aggregation"}]},
        # Olatunji et al.'s inductive target, training nodes answered on their own subgraph
        {"name": "centralized", "params": {"epochs": 5, "inductive": True, "serves_on": "tstf"}},
        {  # a published metric-DP embedding table instead of a query API
            "name": "fedavg",
            "params": {"rounds": 2},
            "defenses": [{"name": "metric-dp", "params": {"sigma0": 0.5}}],
        },
    ],
}
ATTACKS = [
    {"name": "mia-threshold"},
    {"name": "mia-threshold", "params": {"hops": 2}},
    {"name": "mia-threshold", "params": {"adversary": "server"}},
    {"name": "mia-statistics-tracing"},
    {"name": "mia-statistics-tracing", "params": {"adversary": "client"}},
    {"name": "link-stealing"},  # the clients' served deployments
    {"name": "graph-reconstruction", "params": {"source": "release"}},
    # what the metric-DP release really published, kept for the evaluator
    {"name": "reidentification-audit", "params": {"trials": 100}},
]


def metrics(out):
    return {(r.cell_id, r.attack_key): (r.status, r.metrics) for r in ResultsStore(out).attacks()}


def ran_ok(out):
    """(target+defenses, attack, adversary) of every attack row that ran."""
    store = ResultsStore(out)
    cells = {c.cell_id: c.config["target"] for c in store.cells()}
    return {
        (
            "+".join(
                [cells[r.cell_id]["name"]]
                + [d["name"] for d in cells[r.cell_id].get("defenses") or []]
            ),
            r.attack,
            r.params.get("adversary"),
        )
        for r in store.attacks()
        if r.status == "ok"
    }


# 32 s; attacking a stored folder stays default (test_before_issue_42.py, test_runner.py)
@pytest.mark.slow
def test_attacks_run_later_equal_attacks_run_in_the_suite(tmp_path):
    api.run_suite({**BASE, "attacks": ATTACKS}, tmp_path / "together")
    api.run_suite(BASE, tmp_path / "later")
    assert not ResultsStore(tmp_path / "later").attacks()
    args = ["attack", str(tmp_path / "later")]
    for a in ATTACKS:
        args += ["--attack", a["name"], "--params", json.dumps(a.get("params", {}))]
    assert main(args) == 0
    later, together = metrics(tmp_path / "later"), metrics(tmp_path / "together")
    assert later == together
    ran = ran_ok(tmp_path / "later")
    assert ("opfgl+secure-aggregation", "mia-statistics-tracing", "client") in ran  # the key
    assert ("fedavg", "link-stealing", None) in ran  # the served deployments
    assert ("centralized", "mia-threshold", None) in ran  # the inductive deployment
    assert ("fedavg+metric-dp", "graph-reconstruction", None) in ran  # the published table
    assert ("fedavg+metric-dp", "reidentification-audit", None) in ran  # and its provenance
    assert api.attack(tmp_path / "later", ATTACKS) == (0, 0)  # stored already: skipped


def test_a_graph_level_personalised_deployment_is_attacked_offline_as_in_the_suite(tmp_path):
    """GCFL's FedAvg deploys each client's own model: the snapshot keeps them and the owner
    table, so membership attacks run later score what they scored in the suite."""
    suite = {
        **BASE,
        "datasets": [{"name": "synthetic-graphs", "params": {"num_graphs": 90}}],
        "partitions": [{"method": "iid", "num_clients": 3}],
        "targets": [{"name": "fedavg", "params": {"rounds": 2, "keep_local": ["project", "head"]}}],
    }
    attacks = [
        {"name": "mia-threshold"},
        {"name": "mia-threshold", "params": {"adversary": "server"}},
    ]
    api.run_suite({**suite, "attacks": attacks}, tmp_path / "together")
    api.run_suite(suite, tmp_path / "later")
    args = ["attack", str(tmp_path / "later")]
    for a in attacks:
        args += ["--attack", a["name"], "--params", json.dumps(a.get("params", {}))]
    assert main(args) == 0
    assert metrics(tmp_path / "later") == metrics(tmp_path / "together")
    statuses = sorted(status for status, _ in metrics(tmp_path / "later").values())
    assert statuses == ["not_applicable", "ok"]  # the server holds only the convolutions
    # the owner table and the client models are checked like the rest of a snapshot
    from fgl_workbench.data.catalog import load_dataset
    from fgl_workbench.data.federation import build_federation
    from fgl_workbench.data.partition import make_partition

    data = load_dataset("synthetic-graphs", {"num_graphs": 90})
    fed = build_federation(data, make_partition(data, "iid", 3, seed=0))
    path = next((tmp_path / "later" / "targets").glob("*.pt"))
    assert restore(path, fed).query.owner.shape == (90,)
    stored = torch.load(path, weights_only=True)
    for field, value, match in (
        ("owner", torch.full((90,), 7), "query.owner: expected"),  # no such client
        ("owner", torch.zeros(89, dtype=torch.int64), "query.owner: expected"),
        ("client_models", {"0": {"head.weight": torch.zeros(1)}}, "client_models.0: the stored"),
    ):
        bad = {**stored, "query": {**stored["query"]}}
        if field == "owner":
            bad["query"]["owner"] = value
        else:
            bad["client_models"] = value
        torch.save(bad, path)
        with pytest.raises(SnapshotError, match=match):
            restore(path, fed)


def test_snapshots_hold_plain_data_only(tmp_path):
    api.run_suite(BASE, tmp_path)
    for path in (tmp_path / "targets").glob("*.pt"):
        data = torch.load(path, weights_only=True)
        assert data["format"] == 2 and data["global_model"]
    masked = unplain(plain(np.arange(5, dtype=np.uint64)))
    assert masked.dtype == np.uint64 and masked.tolist() == list(range(5))
    with pytest.raises(SnapshotError, match="object"):
        plain(object())
    # an archive carrying code is refused by the loader
    buffer = io.BytesIO()
    torch.save({"format": 1, "x": ConfigError("x")}, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(buffer, weights_only=True)


def test_architectures_of_every_shape_round_trip():
    from fgl_workbench.targets.gap import GAPSpec

    specs = [
        ModelSpec(ModelConfig(arch="gat", hidden=8, heads=2), 5, 3, "node"),
        GAPSpec(in_dim=5, num_classes=3, encoder_dim=4, hidden=8, hops=2, dropout=0.1),
    ]
    for spec in specs:
        data = spec_data(spec)
        buffer = io.BytesIO()
        torch.save(data, buffer)
        buffer.seek(0)
        assert spec_from(torch.load(buffer, weights_only=True)) == spec
    with pytest.raises(SnapshotError, match="'evil.module:Spec', which no installed"):
        spec_from({"type": "evil.module:Spec", "fields": {}})


def test_a_snapshot_builds_only_allow_listed_types(tmp_path):
    """Classes of modules already imported are not enough: ``subprocess:Popen`` (loaded by
    the standard library) ran a command inside restore; a config field naming ``os:system``
    behind a model's name, or fields that do not fit an allowed type, are refused too. Each
    is one line and the marker never appears."""
    import subprocess  # noqa: F401  (loaded, as it always is in a real run)

    marker = tmp_path / "ran"
    touch = ["touch", str(marker)]
    crafted = [
        {"type": "subprocess:Popen", "fields": {"args": touch}},
        {
            "type": "fgl_workbench.models:ModelSpec",
            "fields": {
                "config": {"__config__": "os:system", "data": {"command": f"touch {marker}"}},
                "in_dim": 3,
                "num_classes": 2,
                "level": "node",
            },
        },
        {"type": "fgl_workbench.models:ModelSpec", "fields": {"args": touch}},
        {"type": "fgl_workbench.models:ModelSpec", "fields": ["not", "a", "mapping"]},
    ]
    for data in crafted:
        with pytest.raises(SnapshotError) as info:
            spec_from(data)
        assert "\n" not in str(info.value)
    assert not marker.exists()


def test_bad_offline_requests_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="attacks\\[0\\].name: unknown attack 'nope'"):
        api.attack(tmp_path, [{"name": "nope"}])
    with pytest.raises(ConfigError, match="attacks\\[0\\].params.hop: unknown parameter .*'hops'"):
        api.attack(tmp_path, [{"name": "mia-threshold", "params": {"hop": 2}}])
    with pytest.raises(ConfigError, match="not a results folder"):
        api.attack(tmp_path, [{"name": "mia-threshold"}])


def test_a_stored_ledger_restores_only_privacy_event_types(tmp_path):
    """A ledger entry naming anything but an event type, or fields that do not fit it, is
    refused with one line; nothing is built or run (the marker never appears)."""
    from fgl_workbench.storage.snapshot import SnapshotError, event_from

    marker = tmp_path / "ran"
    crafted = [
        {"type": "Popen", "args": ["touch", str(marker)]},
        {"type": "analysis", "x": 1},  # a module-level name of fgl_workbench.accountants.events
        {"type": "Gaussian", "sigma": 1.0, "scope": {"unit": "node", "oops": 1}},
    ]
    for data in crafted:
        with pytest.raises(SnapshotError, match="ledger"):
            event_from(data)
    assert not marker.exists()


def test_reading_a_results_folder_imports_nothing_it_names(tmp_path, monkeypatch):
    """A stored suite, a database row and a snapshot's recipe naming ``evilmod:Thing`` (a
    module that would write a marker when imported, importable from where the user stands)
    are read without importing it: the report is written, offline attacks find nothing to
    attack, restoring the snapshot is one line, and the marker never appears."""
    import sqlite3

    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\nThing = object\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    small = {**BASE, "targets": [{"name": "fedavg", "params": {"rounds": 2}}]}
    api.run_suite({**small, "attacks": [{"name": "mia-threshold"}]}, out)
    db = sqlite3.connect(out / "results.sqlite")
    with db:
        (raw,) = db.execute("SELECT value FROM meta WHERE key = 'suite_json'").fetchone()
        suite = json.loads(raw)
        suite["targets"][0]["name"] = "evilmod:Thing"
        db.execute("UPDATE meta SET value = ? WHERE key = 'suite_json'", (json.dumps(suite),))
        db.execute("UPDATE attacks SET attack = 'evilmod:Thing'")
    db.close()
    assert api.build_report(out).exists()
    assert main(["report", str(out)]) == 0  # its summary tables read the rows too
    # the stored suite's cell no longer matches its row: nothing to attack, nothing imported
    assert api.attack(out, [{"name": "mia-threshold", "params": {"hops": 1}}]) == (0, 1)
    (snap,) = (out / "targets").glob("*.pt")
    data = torch.load(snap, weights_only=True)
    data["recipe"]["target"] = "evilmod:Thing"
    torch.save(data, snap)
    with pytest.raises(ConfigError, match="not imported") as info:
        restore(snap, None)
    assert "\n" not in str(info.value)
    assert not marker.exists()


def test_a_snapshot_with_a_pickle_inside_is_refused(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.pt"
    torch.save({"format": 2, "payload": Evil()}, path)
    assert not marker.exists()  # saving did not run it; only unpickling would
    with pytest.raises(SnapshotError, match="refused, it holds more than plain data"):
        restore(path, None)
    assert not marker.exists()


def test_the_clients_secret_key_is_kept_only_when_asked(tmp_path):
    """By default the snapshot withholds the clients' CKKS secret key: the in-suite curious
    client still decrypts, the same attack offline says what it needs."""
    suite = {
        **BASE,
        "keep_client_secrets": False,
        "targets": [
            t for t in BASE["targets"] if t.get("defenses") == [{"name": "secure-aggregation"}]
        ],
    }
    tracing = {"name": "mia-statistics-tracing", "params": {"adversary": "client"}}
    api.run_suite({**suite, "attacks": [tracing]}, tmp_path / "in-suite")
    (row,) = ResultsStore(tmp_path / "in-suite").attacks()
    assert row.status == "ok"
    api.run_suite(suite, tmp_path / "later")
    (snap,) = (tmp_path / "later" / "targets").glob("*.pt")
    data = torch.load(snap, weights_only=True)
    assert data["keys"] is None and data["keys_withheld"]
    api.attack(tmp_path / "later", [tracing])
    (row,) = ResultsStore(tmp_path / "later").attacks()
    assert row.status == "not_applicable" and "--keep-client-secrets" in row.reason


def test_stored_dimensions_cannot_make_restoring_allocate_more_than_stored(tmp_path):
    """A snapshot whose architecture claims 10^9 input features (some 64 GB of weights)
    is refused in one line before anything is built."""
    api.run_suite(BASE, tmp_path)
    path = next((tmp_path / "targets").glob("*.pt"))
    data = torch.load(path, weights_only=True)
    data["spec"]["fields"]["in_dim"] = 10**9
    torch.save(data, path)
    with pytest.raises(SnapshotError, match="has 64,000,[0-9,]+ weights, the snapshot stores"):
        restore(path, None)


def test_stored_paths_and_links_cannot_lead_out_of_the_folder(tmp_path):
    """An artifact path read from the database may not leave the folder, and nothing is
    read or written through a symbolic link planted in it (the report would have overwritten
    the file the link names)."""

    api.run_suite(BASE, tmp_path / "run")
    store = ResultsStore(tmp_path / "run", create=False)
    secret = tmp_path / "users-file"
    secret.write_text("keep me")
    for rel in ("/etc/passwd", "../users-file"):
        with pytest.raises(ConfigError, match="leaves the results folder"):
            store.load_roc(rel)
    (tmp_path / "run" / "report.html").symlink_to(secret)
    with pytest.raises(ConfigError, match="symbolic link in the results folder"):
        api.build_report(tmp_path / "run")
    assert secret.read_text() == "keep me"
    store.close()
