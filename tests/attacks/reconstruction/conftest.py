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


@pytest.fixture(scope="session")
def fit_fedsgd():
    """FedAvg as FedSGD (one full-batch SGD step, one round, a 32-unit model without
    dropout, the first and last payloads kept): what gradient-matching and GRAIN read."""
    fedavg = TARGETS.get("fedavg")
    config = fedavg.Config(
        rounds=1, local_epochs=1, optimizer="sgd", lr=0.1, batch_size=1000,
        keep_payloads="first_and_last", model={"hidden": 32, "dropout": 0.0},
    )  # fmt: skip
    return lambda federation: fedavg.fit(federation, config, [], 0)
