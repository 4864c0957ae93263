"""Same seed, same numbers: a quickstart-sized suite (graph level with DP-SGD and its canary
audit, node level with the server's and a client's view) is run and every number it stores is
compared with the reference stored before the package was reorganised (issue 42). The cells'
``history_json`` joined it with issue 45, every number stored before unchanged."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fgl_workbench.interface.api import run_suite

REFERENCE = Path(__file__).with_name("reference_metrics.json")
# Machine-dependent columns: wall-clock seconds and creation times.
UNSTABLE = {"seconds", "seconds_partition", "seconds_train", "created"}
# Keys of each table's rows; every other stored column is compared.
KEYS = {
    "cells": ("cell_id",),
    "attacks": ("cell_id", "attack_key"),
    "epsilons": ("cell_id", "adversary", "unit"),
    "audits": ("cell_id", "defense", "unit", "mechanism"),
}
GRAPHS = {
    "name": "reference-graphs",
    "reproducible": True,
    "seeds": [0],
    "datasets": [
        {
            "name": "synthetic-graphs",
            "params": {"num_graphs": 160, "num_features": 16, "label_noise": 0.1},
        }
    ],
    "partitions": [{"method": "iid", "num_clients": 2, "aux_fraction": 0.25}],
    "targets": [
        {"name": "fedavg", "params": {"rounds": 3, "local_epochs": 2}},
        {
            "name": "fedavg",
            "params": {"rounds": 3, "local_epochs": 2},
            "defenses": [
                {
                    "name": "dp-sgd",
                    "params": {"clip": 1.0, "sample_rate": 0.5, "target_epsilon": 1.0},
                }
            ],
        },
    ],
    "audit": {"canaries": 40},
    "attacks": [
        {"name": "mia-threshold", "params": {"signal": "loss"}},
        {"name": "mia-threshold", "params": {"signal": "loss", "adversary": "server"}},
        {"name": "mia-rmia", "params": {"num_references": 2}},
    ],
}
NODES = {
    "name": "reference-nodes",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "targets": [
        {"name": "fedavg", "params": {"rounds": 3}},
        {
            "name": "fedavg",
            "params": {"rounds": 3},
            "defenses": [
                {"name": "gaussian-upload", "params": {"clip": 1.0, "noise_multiplier": 1.0}}
            ],
        },
    ],
    "attacks": [
        {"name": "mia-threshold", "params": {"signal": "loss", "hops": 1}},
        {"name": "mia-threshold", "params": {"signal": "loss", "adversary": "server"}},
    ],
}


def stored_metrics(out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Every stored column but the timings, per table and row key, JSON columns parsed."""
    db = sqlite3.connect(out / "results.sqlite")
    db.row_factory = sqlite3.Row
    try:
        tables = {}
        for table, key in KEYS.items():
            rows = {}
            for row in db.execute(f"SELECT * FROM {table}"):
                names = row.keys()  # a sqlite3.Row iterates over its values, not its names
                values = {k: _parsed(k, row[k]) for k in names if k not in UNSTABLE}
                rows["/".join(str(row[k]) for k in key)] = values
            tables[table] = rows
        return tables
    finally:
        db.close()


def _parsed(column: str, value: Any) -> Any:
    return json.loads(value) if column.endswith("_json") and value is not None else value


def run_reference(tmp: Path) -> dict[str, Any]:
    """The reference suites' stored numbers, one entry per suite."""
    found = {}
    for raw in (GRAPHS, NODES):
        out = tmp / raw["name"]
        run_suite(raw, out)
        found[raw["name"]] = stored_metrics(out)
    return found


def test_stored_metrics_match_the_reference(tmp_path, assert_same):
    expected = json.loads(REFERENCE.read_text())
    assert_same(run_reference(tmp_path), expected)


def test_a_perturbed_reference_is_caught(assert_same):
    """The comparison has teeth: one metric moved by 1e-6 relative fails it."""
    expected = json.loads(REFERENCE.read_text())
    found = json.loads(json.dumps(expected))
    first = next(iter(found["reference-graphs"]["attacks"].values()))
    first["metrics_json"]["auc"] *= 1 + 1e-6
    with pytest.raises(AssertionError):
        assert_same(found, expected)


if __name__ == "__main__":  # writes the reference: run once on the code before a refactor
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        REFERENCE.write_text(json.dumps(run_reference(Path(tmp)), indent=1, sort_keys=True) + "\n")
