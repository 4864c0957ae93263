import pytest

from fgl_workbench.adversary.threat import ServerView, server_view
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.defenses import applied
from fgl_workbench.running.cell import inductive_release
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.class_statistics import class_statistics
from fgl_workbench.transcript import CLASS_STATISTICS, SERVER, Transcript, client


@pytest.fixture(scope="session")
def statistics_setting():
    """A CSBM federation of 8 clients, a FedAvg run on it (for the knowledge: architecture,
    recipe, auxiliary pool) and a server view holding the class statistics every client
    computed from its own labelled nodes (O-pFGL's upload, ``min_count`` 2)."""
    ds = csbm(CSBMParams(num_nodes=600, num_features=16, num_classes=3, signal=2.0, seed=2))
    part = make_partition(ds, "louvain", 8, 0, aux_fraction=0.1)
    federation = build_federation(ds, part)
    fedavg = TARGETS.get("fedavg")
    trained = fedavg.fit(federation, fedavg.Config(rounds=3), [], 0)
    transcript = Transcript()
    for c in federation.clients:
        d = c.data
        stats = class_statistics(d.x, d.edge_index, d.y.numpy(), d.train_mask.numpy(), 3)
        transcript.send(0, client(c.client_id), SERVER, CLASS_STATISTICS, stats.as_payload())
    base = server_view(trained, federation)
    view = ServerView(
        base.level, base.num_classes, base.num_clients, transcript.received_by(SERVER), base.spec
    )
    return federation, trained, view


@pytest.fixture(scope="session")
def exchanged_setting():
    """CE-FedGNN on a homophilous CSBM over 4 Louvain clients, without and with metric-DP on
    the boundary embeddings it exchanges (σ0 = 0.3, about 20 releases per node)."""
    ds = csbm(CSBMParams(num_nodes=600, homophily=0.9, seed=0))
    federation = build_federation(ds, make_partition(ds, "louvain", 4, 0, aux_fraction=0.1))
    ce = TARGETS.get("ce-fedgnn")
    cfg = {
        "rounds": 20,
        "local_steps": 8,
        "batch_size": 32,
        "model": {"arch": "sage", "hidden": 32},
    }
    clean = ce.fit(federation, cfg, [], 0)
    noisy = ce.fit(federation, cfg, [applied("metric-dp", {"sigma0": 0.3, "k": 10})], 0)
    return federation, clean, noisy


def overfit_fedavg(membership: str = "transductive"):
    """Weak features, few training nodes, long training without regularisation, the last
    round released: a FedAvg target whose members the membership attacks must find."""
    params = CSBMParams(num_nodes=500, num_classes=4, num_features=256, signal=0.1, seed=1)
    ds = csbm(params)
    part = make_partition(
        ds, "metis", 3, seed=0, split=(0.15, 0.15, 0.7), aux_fraction=0.3, membership=membership
    )
    fed = build_federation(ds, part)
    cfg = {
        "rounds": 30,
        "local_epochs": 5,
        "weight_decay": 0.0,
        "release": "last",
        "model": {"dropout": 0.0, "hidden": 128},
    }
    return fed, TARGETS.get("fedavg").fit(fed, cfg, [], seed=0)


@pytest.fixture(scope="session")
def overfit():
    return overfit_fedavg()


@pytest.fixture(scope="session")
def overfit_inductive():
    """The same, each client on the subgraph its training nodes induce."""
    fed, trained = overfit_fedavg("inductive")
    inductive_release(trained, fed)  # what the runner does after fit
    return fed, trained
