"""``audit_model(out=DIR)``: the audit as an ordinary results folder, read by ``report``,
``results`` and ``audit_stored``; a crash keeps the finished attacks and a re-run runs only
the rest; ``attack`` refuses it in one line; a suite's folder is not written into."""

import json
import sqlite3
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch
from test_model import GCN, train

import fgl_workbench.external.model as external_model
from fgl_workbench.errors import ConfigError
from fgl_workbench.external import audit_model, audit_stored
from fgl_workbench.external.folder import recipe_text
from fgl_workbench.interface import api
from fgl_workbench.storage.store import ResultsStore

LOSS = {"name": "mia-threshold", "params": {"signal": "loss"}}
CONFIDENCE = {"name": "mia-threshold", "params": {"signal": "confidence"}}


@pytest.fixture(scope="module")
def split(cora):
    ds = cora
    members = torch.as_tensor(ds.public_split[0])
    mask = torch.zeros(ds.data.num_nodes, dtype=torch.bool)
    mask[members] = True
    return ds.data, members, mask


def test_the_folder_is_read_by_report_results_and_audit_stored(split, tmp_path):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    audit = audit_model(model, data, members, train_fn=train, attacks=[LOSS], out=tmp_path)
    frame = api.results(tmp_path)
    assert len(frame) == 1 and frame["target"].item() == "external"
    assert frame["defenses"].item() == "none"
    scored = next(iter(audit.attacks.values()))
    nonmembers = np.sort(scored.ids[~scored.is_member])
    with torch.no_grad():  # the model's accuracy on the records it did not train on
        predicted = model.eval()(data.x, data.edge_index)[nonmembers].argmax(1)
    accuracy = (predicted == data.y[nonmembers]).double().mean().item()
    assert frame["utility.accuracy"].item() == pytest.approx(accuracy, abs=1e-12)
    row = frame.iloc[0]
    stored = audit_stored(tmp_path, row["cell_id"], row["attack_key"])
    assert stored.metrics == scored.metrics
    assert row["metric.auc"] == stored.metrics["auc"]
    assert (tmp_path / "report.pdf").is_file()  # written with the folder
    page = (tmp_path / "report.html").read_text()
    assert "trained outside the workbench" in page and "mia-threshold(signal=loss)" in page
    with pytest.raises(ConfigError, match="trained outside the workbench.*audit_model"):
        api.attack(tmp_path, [LOSS])
    with sqlite3.connect(tmp_path / "results.sqlite") as db:  # its mark removed
        db.execute("DELETE FROM meta WHERE key = 'external'")
    with pytest.raises(ConfigError, match="recorded suite cannot be rebuilt"):
        api.attack(tmp_path, [LOSS])
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        db.execute("INSERT INTO meta VALUES ('external', '1')")
    suite = {
        "name": "a suite",
        "datasets": [{"name": "csbm"}],
        "partitions": [{"method": "louvain", "num_clients": 2}],
        "targets": [{"name": "centralized"}],
    }
    with pytest.raises(ConfigError, match="^--out .* holds audits of models trained outside"):
        api.run_suite(suite, tmp_path)


def test_a_crash_keeps_finished_attacks_and_a_rerun_runs_only_the_rest(
    split, tmp_path, monkeypatch
):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    ran, calls = external_model.ran, []

    def crashing(name, config, inp, seed):
        calls.append(config.signal)
        if config.signal == "confidence" and len(calls) == 2:
            raise RuntimeError("killed mid-audit")
        return ran(name, config, inp, seed)

    monkeypatch.setattr(external_model, "ran", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        audit_model(model, data, members, train_fn=train, attacks=[LOSS, CONFIDENCE], out=tmp_path)
    assert len(api.results(tmp_path)) == 1  # the loss attack finished and was kept
    again = audit_model(
        model, data, members, train_fn=train, attacks=[LOSS, CONFIDENCE], out=tmp_path
    )
    assert calls == ["loss", "confidence", "confidence"]  # the stored one was read back
    assert "read back from the results folder, not run now: mia-threshold(signal=loss)" in (
        again.summary()
    )
    fresh = audit_model(model, data, members, train_fn=train, attacks=[LOSS])
    label = "mia-threshold(signal=loss)"
    assert again.attacks[label].metrics == fresh.attacks[label].metrics
    assert len(api.results(tmp_path)) == 2


def test_a_dp_model_and_a_plain_one_are_two_cells_of_one_report_paired(split, tmp_path):
    data, members, mask = split
    history = [(1.0, 0.05, 100)]  # as an Opacus accountant records it: (σ, q, steps)
    for seed, privacy in ((0, None), (1, history)):
        model = train(GCN, data, mask, seed)
        audit_model(
            model, data, members, train_fn=train, attacks=[LOSS], privacy=privacy, out=tmp_path
        )
    frame = api.results(tmp_path)
    assert frame["cell_id"].nunique() == 2 and frame["target.weights"].nunique() == 2
    assert frame["target.split"].nunique() == 1  # the same members and non-members
    assert sorted(frame["defenses"]) == ["none", "opacus"]
    page = (tmp_path / "report.html").read_text()
    assert "no undefended twin" not in page and "(undefended " in page  # paired
    assert "No DP training was stated for this model" in page


def test_another_recipe_or_another_forward_is_another_cell(split, tmp_path):
    """The same weights and the same recipe name are not the same model: the cell names the
    recipe's code and the model's answers, so a re-run reads back only what was measured on
    this model."""
    data, members, mask = split
    model = train(GCN, data, mask, 0)

    def edited(factory, data, mask, seed):  # the user's recipe, changed under the same name
        return train(factory, data, mask, seed + 1)

    class Halved(GCN):
        def forward(self, x, edge_index):
            return super().forward(x, edge_index) / 2 + (edge_index.numel() > 0)

    halved = Halved()
    halved.load_state_dict(model.state_dict())
    for m, fn in ((model, train), (model, edited), (halved, train)):
        audit_model(m, data, members, train_fn=fn, attacks=[LOSS], out=tmp_path)
    frame = api.results(tmp_path)
    assert frame["cell_id"].nunique() == 3 and frame["target.weights"].nunique() == 1
    assert recipe_text(train) == recipe_text(train)  # the same in every call and process
    assert recipe_text(partial(train, seed=1)) != recipe_text(partial(train, seed=2))


def test_stored_figures_that_are_not_their_records_are_run_again(split, tmp_path, monkeypatch):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    audit_model(model, data, members, train_fn=train, attacks=[LOSS], out=tmp_path)
    with sqlite3.connect(tmp_path / "results.sqlite") as db:  # a planted AUC
        (text,) = db.execute("SELECT metrics_json FROM attacks").fetchone()
        db.execute("UPDATE attacks SET metrics_json = ?", (text.replace('"auc": 0.', '"auc": 1'),))
    ran, calls = external_model.ran, []
    monkeypatch.setattr(external_model, "ran", lambda *a: calls.append(a[0]) or ran(*a))
    again = audit_model(model, data, members, train_fn=train, attacks=[LOSS], out=tmp_path)
    assert calls == ["mia-threshold"] and not again.resumed
    assert api.results(tmp_path)["metric.auc"].item() < 1.0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"name": "x" * 2000}, "^name: expected a non-empty text of at most 200"),
        ({"name": " "}, "^name: "),
        ({"seed": -1}, r"^seed: expected a whole number >= 0 \(got -1\)"),
        ({"seed": "0"}, "^seed: "),
    ],
)
def test_a_bad_name_or_seed_is_refused_before_the_folder_is_touched(
    split, tmp_path, change, message
):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    with pytest.raises(ConfigError, match=message):
        audit_model(model, data, members, attacks=[LOSS], train_fn=train, out=tmp_path, **change)
    assert not tmp_path.joinpath("results.sqlite").exists()


def test_a_suite_folder_or_another_delta_is_refused(split, tmp_path):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    store = ResultsStore(tmp_path / "suite")
    store.set_meta("suite_json", json.dumps({"name": "a suite", "delta": 1e-5}))
    store.close()
    with pytest.raises(ConfigError, match="^out: .* holds a suite's results"):
        audit_model(model, data, members, attacks=[LOSS], train_fn=train, out=tmp_path / "suite")
    audit_model(model, data, members, attacks=[LOSS], train_fn=train, out=tmp_path / "mine")
    with pytest.raises(ConfigError, match="^delta: .* holds audits at δ = 1e-05"):
        audit_model(
            model, data, members, attacks=[LOSS], train_fn=train, delta=1e-3, out=tmp_path / "mine"
        )


def test_stored_records_that_are_not_this_audits_candidates_are_run_again(
    split, tmp_path, monkeypatch
):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    first = audit_model(model, data, members, train_fn=train, attacks=[LOSS], out=tmp_path)
    row = api.results(tmp_path).iloc[0]
    store = ResultsStore(tmp_path)
    kept = store.load_records(row["cell_id"], row["attack_key"])
    store.save_records(row["cell_id"], row["attack_key"], replace(kept, ids=kept.ids[::-1]))
    store.close()
    ran, calls = external_model.ran, []
    monkeypatch.setattr(external_model, "ran", lambda *a: calls.append(a[0]) or ran(*a))
    again = audit_model(model, data, members, train_fn=train, attacks=[LOSS], out=tmp_path)
    assert calls == ["mia-threshold"]
    label = "mia-threshold(signal=loss)"
    assert again.attacks[label].metrics == first.attacks[label].metrics


@pytest.mark.slow  # 1-4 minutes on two cores; the default run keeps this module's shorter cases
def test_link_and_attribute_rows_join_the_folder(split, tmp_path):
    data, members, mask = split
    model = train(GCN, data, mask, 0)
    attacks = [LOSS, {"name": "link-stealing"}, {"name": "attribute-inference"}]
    audit = audit_model(model, data, members, train_fn=train, attacks=attacks, out=tmp_path)
    frame = api.results(tmp_path).set_index("attack")
    link = audit.attacks["link-stealing"].metrics
    assert frame.loc["link-stealing", "metric.auc_uniform"] == link["auc_uniform"]
    accuracy = audit.inferences["attribute-inference"].metrics["accuracy"]
    assert frame.loc["attribute-inference", "metric.accuracy"] == accuracy
    kept = list((tmp_path / "artifacts").rglob("*.records.npz"))
    assert len(kept) == 1  # per-record scores of membership rows, as a suite keeps them
    page = (tmp_path / "report.html").read_text()
    assert "link-stealing" in page and "attribute-inference" in page
