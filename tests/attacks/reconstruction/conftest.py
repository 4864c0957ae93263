import pytest

from fgl_workbench.attacks.challenges import link_challenge
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.targets import TARGETS


@pytest.fixture(scope="session")
def setting():
    """FedAvg on a homophilous CSBM over 4 Louvain clients, and its link challenge."""
    ds = csbm(CSBMParams(num_nodes=600, homophily=0.9, seed=0))
    federation = build_federation(ds, make_partition(ds, "louvain", 4, 0, aux_fraction=0.1))
    fedavg = TARGETS.get("fedavg")
    trained = fedavg.fit(federation, fedavg.Config(rounds=30), [], 0)
    return federation, trained, link_challenge(federation, 0)
