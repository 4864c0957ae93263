import pytest

from reports import build_report
from workbench.runner import run_suite
from workbench.suite import parse_suite

DP_SUITE = {
    "name": "dp",
    "reproducible": True,
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "louvain", "num_clients": 3}],
    "targets": [
        {"name": "fedavg", "params": {"rounds": 3}},
        {
            "name": "fedavg",
            "params": {"rounds": 3},
            "defenses": [{"name": "dp-fedavg", "params": {"noise_multiplier": 1.0}}],
        },
    ],
    "attacks": [{"name": "mia-threshold"}],
}


@pytest.fixture(scope="session")
def dp_report(tmp_path_factory):
    """The report of a small suite with an undefended and a DP-FedAvg target."""
    out = tmp_path_factory.mktemp("dp-report")
    run_suite(parse_suite(DP_SUITE), out, quiet=True)
    return build_report(out)
