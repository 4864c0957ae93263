"""A suite's ``partitions[].membership``: validated, hashed only when inductive, and run
end to end (test utility from the released model, the recipe stamped and stored)."""

from __future__ import annotations

import math

import pytest

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.errors import ConfigError
from fgl_workbench.running.cell import partition_cell
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import expand, parse_suite
from fgl_workbench.seeding import Streams
from fgl_workbench.storage.snapshot import restore
from fgl_workbench.storage.store import ResultsStore

PARTITION = {"method": "metis", "num_clients": 3, "aux_fraction": 0.2}
RAW = {
    "name": "inductive",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [PARTITION, {**PARTITION, "membership": "inductive"}],
    "targets": [{"name": "fedavg", "params": {"rounds": 3, "release": "last"}}],
    "attacks": [{"name": "mia-threshold", "params": {"signal": "loss", "hops": 2}}],
}


def test_membership_enters_a_cells_config_and_label_only_when_inductive():
    transductive, inductive = expand(parse_suite(RAW))
    assert "membership" not in transductive.config()["partition"]
    assert inductive.config()["partition"]["membership"] == "inductive"
    assert "/metis-3/" in transductive.label and "/metis-3-inductive/" in inductive.label
    assert transductive.cell_id != inductive.cell_id


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ({**PARTITION, "membership": "inductve"}, r"partitions\[0\]\.membership"),
        (
            {"method": "iid", "num_clients": 3, "membership": "inductive"},
            r"partitions\[0\]\.membership: 'inductive' is a node-level setting",
        ),
    ],
)
def test_a_bad_membership_is_refused_naming_the_field(partition, message):
    raw = {**RAW, "partitions": [partition]}
    if partition["method"] == "iid":
        raw["datasets"] = [{"name": "synthetic-graphs"}]
    with pytest.raises(ConfigError, match=message):
        parse_suite(raw)


@pytest.mark.slow  # about 40 s on a loaded two-core machine
def test_an_inductive_cell_runs_scores_and_stores_its_recipe(tmp_path, capsys):
    suite = parse_suite(RAW)
    run_suite(suite, tmp_path, quiet=True)
    store = ResultsStore(tmp_path)
    try:
        rows = {r.label: r for r in store.cells()}
        for row in rows.values():
            assert math.isfinite(row.utility["accuracy"]), row.label
        cell = next(c for c in expand(suite) if c.partition.membership == "inductive")
        ds = load_dataset("csbm", {"num_nodes": 300}, None)
        fed = build_federation(ds, partition_cell(cell, ds, Streams.public()).partition)
        trained = restore(store.target_path(cell.cell_id), fed)
        assert trained.recipe.inductive
        assert len(store.done_attacks(cell.cell_id)) == 1
    finally:
        store.close()
    from fgl_workbench.interface.cli import print_measured

    capsys.readouterr()
    print_measured(tmp_path)  # the two kinds of test accuracy are told apart
    assert "An -inductive partition's clients hold no test nodes" in capsys.readouterr().out
