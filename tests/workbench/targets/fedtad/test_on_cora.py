"""FedTAD end to end on real Cora through the suite runner: a few rounds over 5 Louvain
clients, then the server's attacks on it. The reliability vectors each client uploads before
round 1 give its label histogram away (closer than the auxiliary prior), and membership in the
uploaded models is scored per client."""

from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore

SUITE = {
    "name": "fedtad-cora",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "Cora"}],
    "partitions": [
        {"method": "louvain", "num_clients": 5, "params": {"delta": 20}, "aux_fraction": 0.2}
    ],
    "targets": [{"name": "fedtad", "params": {"rounds": 4, "outer_steps": 2, "student_steps": 2}}],
    "attacks": [
        {"name": "uploaded-label-distribution", "params": {"reads": "reliability"}},
        {"name": "mia-threshold", "params": {"signal": "loss", "adversary": "server"}},
    ],
}


def test_fedtad_on_cora_runs_and_its_reliabilities_leak_label_histograms(data_root, tmp_path):
    run_suite(parse_suite(SUITE), tmp_path, quiet=True)
    store = ResultsStore(tmp_path)
    (cell,) = store.cells()
    assert cell.utility["accuracy"] > 0.5  # 4 rounds already learn Cora well above chance
    rows = {r.attack: r for r in store.attacks()}
    assert all(r.status == "ok" for r in rows.values())
    leak = rows["uploaded-label-distribution"].metrics
    assert leak["clients"] == 5
    assert leak["tv_mean"] < 0.5 * leak["tv_baseline"]
    server = rows["mia-threshold"].metrics
    assert 0.0 <= server["client_auc_min"] <= server["client_auc_max"] <= 1.0
