"""Structure inversion at the server: a client's uploaded GCN gives its edges away beyond
chance (GraphMI), an upload that never saw the client's graph gives nothing, and the pairs
asked about are the client's own, balanced, with its edges nowhere in the knowledge."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import server_view
from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.reconstruction.structure import (
    structure_challenge,
    structure_knowledge,
    structure_metrics,
)
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, SyntheticGraphsParams, csbm, synthetic_graphs
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import MODEL_WEIGHTS, client

MODEL = {"hidden": 32, "dropout": 0.0}


@pytest.fixture(scope="module")
def setting():
    """FedAvg on a homophilous CSBM over 2 Louvain clients (about 150 nodes each, so a
    client's non-adjacent pairs mix classes, as GraphMI's uniform non-edges do)."""
    ds = csbm(CSBMParams(num_nodes=330, homophily=0.9, signal=0.5, seed=3))
    federation = build_federation(ds, make_partition(ds, "louvain", 2, 0, aux_fraction=0.1))
    fedavg = TARGETS.get("fedavg")
    trained = fedavg.fit(federation, fedavg.Config(rounds=30, model=MODEL), [], 0)
    return federation, trained


def _attack(federation, trained, view=None, **params):
    attack = ATTACKS.get("structure-inversion")
    cfg = attack.Config(**params)
    task = structure_challenge(federation, cfg.client, 0)
    knowledge = structure_knowledge(federation, trained, cfg.client)
    view = view or server_view(trained, federation)
    out = attack.run(AttackInput(view, knowledge, task.candidates), cfg, 0)
    return structure_metrics(out, task)[0]


def test_a_clients_uploaded_model_gives_its_edges_away(setting):
    """The model term alone (no feature prior): what the upload leaks."""
    m = _attack(*setting, smoothness=0.0)
    assert m["auc_ci_low"] > 0.55, m


def test_an_upload_that_never_saw_the_graph_gives_nothing(setting):
    """The client's upload swapped for a freshly initialised model: nothing of its edges."""
    federation, trained = setting
    view = server_view(trained, federation)
    fresh = trained.spec.build().state_dict()
    received = tuple(
        replace(m, payload=fresh)
        if m.sender == client(0) and m.kind == MODEL_WEIGHTS and m.payload is not None
        else m
        for m in view.received
    )
    m = _attack(federation, trained, replace(view, received=received), smoothness=0.0)
    assert m["auc_ci_low"] < 0.5 < m["auc_ci_high"], m


def test_the_challenge_is_the_clients_balanced_pairs(setting):
    federation, _ = setting
    task = structure_challenge(federation, 1, 0)
    ids = federation.clients[1].data.global_id.numpy()
    assert np.isin(task.candidates.src, ids).all() and np.isin(task.candidates.dst, ids).all()
    assert task.is_edge.sum() == (~task.is_edge).sum() > 0
    a, b = task.candidates.src, task.candidates.dst
    edges = federation.dataset.data.edge_index.numpy()
    linked = set(zip(edges[0].tolist(), edges[1].tolist(), strict=True))
    truth = np.array([(u, v) in linked for u, v in zip(a.tolist(), b.tolist(), strict=True)])
    assert np.array_equal(truth, task.is_edge)


def test_the_knowledge_holds_no_edge_of_the_client(setting):
    federation, trained = setting
    knowledge = structure_knowledge(federation, trained, 0)
    assert knowledge.graph is not None and knowledge.graph.edge_index.numel() == 0
    c = federation.clients[0].data
    assert torch.equal(knowledge.client_nodes.x, c.x)
    assert knowledge.client_nodes.x is not c.x
    assert np.array_equal(knowledge.client_nodes.labels, c.y[c.train_mask].numpy())


def test_graphmi_is_node_level(setting):
    federation, trained = setting
    with pytest.raises(NotApplicableError, match="arch must be gcn"):
        sage = replace(
            trained,
            spec=replace(
                trained.spec, config=trained.spec.config.model_copy(update={"arch": "sage"})
            ),
        )
        _attack(federation, sage)


def test_graph_level_pairs_cover_every_graph_and_exact_recovery_is_per_graph(small_graphs):
    """Graph level: every pair of every training graph of the client is asked about, and a
    graph counts as recovered only when all its pairs are decided right."""
    federation = build_federation(small_graphs, make_partition(small_graphs, "iid", 3, seed=0))
    task = structure_challenge(federation, 0, 0)
    graphs = federation.clients[0].train
    assert len(task.candidates) == sum(g.num_nodes * (g.num_nodes - 1) // 2 for g in graphs)
    perfect = AttackOutput(task.is_edge.astype(float), threshold=0.5)
    assert structure_metrics(perfect, task)[0]["exact_rate"] == 1.0
    one_wrong = task.is_edge.astype(float)
    first = np.flatnonzero(task.graph_of == 0)[0]
    one_wrong[first] = 1.0 - one_wrong[first]
    m = structure_metrics(AttackOutput(one_wrong, threshold=0.5), task)[0]
    assert m["exact_rate"] == pytest.approx(1 - 1 / len(graphs))
    assert m["exact_ci_low"] < m["exact_rate"] < m["exact_ci_high"]


FEDSGD = {
    "rounds": 1,
    "local_epochs": 1,
    "optimizer": "sgd",
    "lr": 0.1,
    "batch_size": 1000,
    "keep_payloads": "first_and_last",
    "model": {"hidden": 32, "dropout": 0.0},
}
MATCH = {"objective": "update", "round": "first", "smoothness": 0.0, "optimiser": "adam"}


@pytest.fixture(scope="module")
def tiny_graphs():
    """FedSGD (one full-batch SGD step per round) over 30 clients holding tiny graphs (4 to 7
    nodes, Gaussian features): each client's update is one or two graphs' gradient."""
    ds = synthetic_graphs(SyntheticGraphsParams(num_graphs=90, min_nodes=4, max_nodes=7))
    federation = build_federation(ds, make_partition(ds, "iid", 30, 0))
    fedavg = TARGETS.get("fedavg")
    return federation, fedavg.fit(federation, fedavg.Config(**FEDSGD), [], 0)


def test_a_tiny_graph_is_recovered_exactly_from_its_one_step_gradient(tiny_graphs):
    m = _attack(*tiny_graphs, client=2, steps=300, lr=0.05, **MATCH)
    assert m["exact_rate"] == 1.0 and m["auc"] == 1.0, m


@pytest.mark.slow
def test_restarts_recover_half_the_tiny_graphs_exactly(tiny_graphs):
    exact = [
        _attack(*tiny_graphs, client=k, steps=300, lr=0.05, restarts=8, **MATCH)["exact_rate"]
        for k in range(4)
    ]
    assert sum(exact) >= 2, exact


def test_another_clients_gradient_recovers_none_of_the_graphs(tiny_graphs):
    """Client k's upload swapped for client k+1's: what is matched is k+1's graph, so none of
    k's graphs come out."""
    federation, trained = tiny_graphs
    view = server_view(trained, federation)
    ups = {m.sender: m.payload for m in view.received if m.kind == MODEL_WEIGHTS}
    exact = []
    for k in range(2):
        swapped = tuple(
            replace(m, payload=ups[client(k + 1)])
            if m.sender == client(k) and m.kind == MODEL_WEIGHTS
            else m
            for m in view.received
        )
        v = replace(view, received=swapped)
        exact.append(_attack(federation, trained, v, client=k, steps=300, lr=0.05, **MATCH))
    assert all(m["exact_rate"] == 0.0 for m in exact), exact
