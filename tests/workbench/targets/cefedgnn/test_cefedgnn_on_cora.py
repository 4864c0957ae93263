"""CE-FedGNN end to end on real Cora through the suite runner: 8 Louvain clients keeping their
cross-client edges, metric-DP on the exchanged embeddings, ε(ρ) in the stored cell, a
membership attack on the released model, the re-identification audit, whose lower bound
must stay under ε(ρ), and the server's attacks on the exchanged embeddings."""

import math

import pytest

from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore

SUITE = {
    "name": "ce-fedgnn-cora",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "Cora"}],
    "partitions": [{"method": "louvain", "num_clients": 8, "aux_fraction": 0.1}],
    "targets": [
        {
            "name": "ce-fedgnn",
            "params": {"rounds": 15, "local_steps": 8, "model": {"arch": "sage", "hidden": 32}},
        },
        {
            "name": "ce-fedgnn",
            "params": {"rounds": 15, "local_steps": 8, "model": {"arch": "sage", "hidden": 32}},
            "defenses": [{"name": "metric-dp", "params": {"sigma0": 0.5}}],
        },
    ],
    "attacks": [
        {"name": "mia-threshold", "params": {"signal": "loss"}},
        {"name": "reidentification-audit", "params": {"trials": 1000}},
        {"name": "feature-inversion", "params": {"source": "exchanged", "steps": 100}},
        {
            "name": "link-stealing",
            "params": {"source": "exchanged", "signal": "embedding", "distance": "cosine"},
        },
        {"name": "attribute-inference", "params": {"source": "exchanged", "signal": "embedding"}},
    ],
}


@pytest.mark.slow  # 26 s; FedGC, FedTAD and the CLI's Cora suite stay default on real data
def test_ce_fedgnn_on_cora(data_root, tmp_path):
    run_suite(parse_suite(SUITE), tmp_path, quiet=True)
    store = ResultsStore(tmp_path)
    plain, noisy = sorted(store.cells(), key=lambda c: len(c.config["target"].get("defenses", [])))
    assert plain.utility["accuracy"] > 0.6  # 7 classes; the majority class is 0.30
    assert plain.utility["mean_releases_boundary"] > 1
    assert noisy.utility["metric_rho"] > 0
    # exact degrees travel beside the noisy states to the server and the halo holders, and
    # the released model is trained on the clean states: ε(ρ) = ∞ against every party
    metric = {e["adversary"]: e["epsilon"] for e in noisy.metric_epsilons}
    assert metric == {"server": math.inf, "clients": math.inf, "querier": math.inf}
    rows = {(r.cell_id, r.attack): r for r in store.attacks()}
    assert rows[(plain.cell_id, "mia-threshold")].status == "ok"
    assert rows[(plain.cell_id, "reidentification-audit")].status == "not_applicable"
    audit = rows[(noisy.cell_id, "reidentification-audit")].metrics
    assert audit["bound_holds"] == 1.0
    assert audit["epsilon_held_out"] <= audit["epsilon_accountant"]
    assert audit["epsilon_accountant"] < math.inf  # the vector releases' own ε(ρ)
    # the server reading the exchanged boundary embeddings (the paper's adversary)
    for name in ("feature-inversion", "link-stealing", "attribute-inference"):
        assert rows[(plain.cell_id, name)].status == "ok", rows[(plain.cell_id, name)]
    assert rows[(plain.cell_id, "link-stealing")].metrics["auc"] > 0.7
    label = rows[(plain.cell_id, "attribute-inference")].metrics
    assert label["accuracy"] > label["accuracy_baseline"] + 0.2
    inverted = rows[(plain.cell_id, "feature-inversion")].metrics
    assert inverted["rows"] == 200 and inverted["mse_nearest_1pct"] > 0
