"""The results folder as one table: what pandas, CSV and Parquet users get."""

import math

import pandas as pd
import pytest

from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main
from fgl_workbench.reports.frame import frame
from fgl_workbench.storage.store import ResultsStore


@pytest.fixture(scope="module")
def out(dp_report):
    return dp_report.parent


def test_one_row_per_cell_and_attack_with_the_stored_numbers(out):
    table = api.results(out)
    store = ResultsStore(out, create=False)
    cells, attacks = store.cells(), store.attacks()
    assert len(table) == len(attacks) == 2
    for a in attacks:
        row = table[table.cell_id == a.cell_id].iloc[0]
        assert row["metric.auc"] == a.metrics["auc"]
        assert row["attack_label"] == "mia-threshold" and row["status"] == a.status
    for c in cells:
        row = table[table.cell_id == c.cell_id].iloc[0]
        assert row["utility.accuracy"] == c.utility["accuracy"]
        assert row["seed"] == c.config["seed"] and row["dataset"] == "csbm"
        for e in c.epsilons:
            got = row[f"epsilon.{e['adversary']}.{e['unit']}"]
            assert got == e["epsilon"] or (math.isinf(got) and math.isinf(e["epsilon"]))
    # central DP: a bound against the querier and the other clients, none against the
    # server that adds the noise
    dp = table[table.defenses == "dp-fedavg"].iloc[0]
    assert math.isfinite(dp["epsilon.querier.client"]) and math.isinf(dp["epsilon.server.client"])
    assert 0 < dp["epsilon_pld.querier.client"] <= dp["epsilon.querier.client"]
    assert "epsilon_pld.server.client" not in table  # no PLD figure for an ∞ row
    # the parameters the suite set, per target and per defense
    assert (table["target.rounds"] == 3).all()
    assert dp["defense.dp-fedavg.noise_multiplier"] == 1.0
    # cell columns first, then the parameters, utility, ε, the attack and its metrics
    columns = list(table.columns)
    assert columns[:3] == ["cell_id", "configuration", "dataset"]
    assert columns.index("seed") < columns.index("target.rounds") < columns.index("utility.auc")
    assert columns.index("utility.accuracy") < columns.index("epsilon.clients.client")
    assert columns.index("epsilon.server.client") < columns.index("attack")
    assert columns.index("attack") < columns.index("metric.auc")


def test_the_undefended_baseline_is_a_group_with_infinite_epsilon(out):
    """An undefended cell guarantees nothing: ∞ in every ε column, and a ``defenses`` value
    that ``groupby`` keeps (an empty one would drop the baseline from every comparison)."""
    table = api.results(out)
    by_defense = table.groupby("defenses")
    assert set(by_defense.groups) == {"none", "dp-fedavg"}
    baseline = by_defense.get_group("none").filter(regex=r"^epsilon(_pld)?\.")
    assert len(baseline.columns) == 5 and (baseline == math.inf).all(axis=None)
    assert by_defense["epsilon.querier.client"].min()["none"] == math.inf
    assert table["defense.dp-fedavg.noise_multiplier"].isna().sum() == 1


def test_a_cell_no_attack_ran_on_keeps_its_row(out):
    store = ResultsStore(out, create=False)
    table = frame(store.cells(), [])
    assert len(table) == 2 and table.attack.isna().all()
    assert "metric.auc" not in table


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_writes_what_the_api_returns(out, tmp_path, fmt, capsys):
    path = tmp_path / f"table.{fmt}"
    assert main(["export", str(out), "--format", fmt, "--output", str(path)]) == 0
    assert str(path) in capsys.readouterr().out
    back = pd.read_csv(path) if fmt == "csv" else pd.read_parquet(path)
    want = api.results(out)
    assert list(back.columns) == list(want.columns)
    pd.testing.assert_series_equal(back["metric.auc"], want["metric.auc"])
    assert main(["export", str(out), "--format", "xlsx"]) == 2
    assert "--format: expected one of csv, parquet" in capsys.readouterr().err


def test_the_history_is_a_row_per_cell_and_round_with_the_training_loss(out):
    """Each cell's rounds as the target measured them: FedAvg's mean local training loss
    beside the validation accuracy it reads (NaN in rounds whose validation nothing read)."""
    table = api.history(out)
    results = api.results(out)
    assert len(table) == 2 * 3 and set(table.cell_id) == set(results.cell_id)
    assert list(table.columns[:8]) == list(results.columns[:8])
    assert list(table.columns[-3:]) == ["round", "train_loss", "val_accuracy"]
    baseline = table[table.defenses == "none"]
    assert list(baseline["round"]) == [0, 1, 2] and (baseline["train_loss"] > 0).all()
    assert baseline.val_accuracy.notna().all()  # best-validation release reads every round
    assert table.groupby("defenses").train_loss.count().to_dict() == {"dp-fedavg": 3, "none": 3}
    store = ResultsStore(out, read_only=True)
    stored = {c.cell_id: c for c in store.cells()}
    store.close()
    for c in stored.values():  # the round the released model came from is in the history
        best = c.utility["best_round"]
        assert table[(table.cell_id == c.cell_id) & (table["round"] == best)].shape[0] == 1
