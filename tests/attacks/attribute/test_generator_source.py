"""Source-dataset inference against CeFGC across domains: a curious client names the dataset
of each generator it received, from the class list (exact in a mixture) or from the weights
alone; the server's shuffle (who sent what) reaches the scorer only."""

import dataclasses

import numpy as np
import pytest

from fgl_workbench.adversary.threat import ClientView
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore

GENERATORS = {"epochs": 5, "steps": 5, "max_nodes": 20, "channels": [2, 2]}
TARGET = {"name": "cefgc", "params": {"generator": GENERATORS, "epochs": 5, "label_channel": True}}
SUITE = {
    "name": "cefgc-across-domains",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "graph-mixture", "params": {"members": ["MUTAG", "IMDB-BINARY"]}}],
    "partitions": [{"method": "cross-dataset", "num_clients": 4, "aux_fraction": 0.1}],
    "targets": [TARGET],
}


@pytest.fixture(scope="module")
def results(data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("source")
    suite = {
        **SUITE,
        "attacks": [
            {"name": "generator-source", "params": {"client": 0}},
            {"name": "generator-source", "params": {"client": 0, "use_classes": True}},
        ],
    }
    run_suite(parse_suite(suite), out, quiet=True)
    return ResultsStore(out)


def test_the_class_list_names_the_dataset(results):
    rows = [r for r in results.attacks() if r.params.get("use_classes")]
    (row,) = rows
    assert row.status == "ok" and row.metrics["accuracy"] == 1.0
    assert row.metrics["generators"] == 3.0


def test_the_weights_alone_give_one_guess_per_generator(results):
    (row,) = [r for r in results.attacks() if not r.params.get("use_classes")]
    assert row.status == "ok" and row.metrics["generators"] == 3.0
    assert 0.0 <= row.metrics["accuracy"] <= 1.0


@pytest.mark.slow  # 3 min: generators trained 30 epochs
def test_the_weights_alone_name_the_dataset_across_domains(data_root, tmp_path):
    suite = {
        **SUITE,
        "targets": [
            {**TARGET, "params": {**TARGET["params"], "generator": {**GENERATORS, "epochs": 30}}}
        ],
    }
    suite["attacks"] = [{"name": "generator-source", "params": {"client": 0}}]
    run_suite(parse_suite(suite), tmp_path, quiet=True)
    (row,) = ResultsStore(tmp_path).attacks()
    # molecules against social graphs: measured 3 of 3; 2 of 3 at 5 epochs
    assert row.metrics["accuracy"] == 1.0


def test_no_client_view_carries_the_senders():
    fields = {f.name for f in dataclasses.fields(ClientView)}
    assert "senders" not in fields and not any("sender" in f for f in fields)
    assert np.isin(["received", "sent", "keys"], list(fields)).all()
