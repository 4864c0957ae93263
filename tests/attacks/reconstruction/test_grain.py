"""GRAIN's search (``structure-inversion`` with ``method: grain``): a single graph's FedSGD
gradient through a GIN wider than the graph gives the graph back exactly; a gradient from
another graph, or noise, gives nothing; the scorer's exact match up to a relabelling that
keeps features counts what the upload can tell, not the labels it cannot."""

from dataclasses import replace

import networkx as nx
import numpy as np
import pytest
import torch

from fgl_workbench.adversary.candidates import NodePairs
from fgl_workbench.adversary.threat import server_view
from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.reconstruction.grain import gradient_spans
from fgl_workbench.attacks.reconstruction.structure import (
    StructureChallenge,
    structure_challenge,
    structure_knowledge,
    structure_metrics,
)
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import SyntheticGraphsParams, synthetic_graphs
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.transcript import MODEL_WEIGHTS, client

GRAIN = {
    "objective": "update",
    "round": "first",
    "smoothness": 0.0,
    "method": "grain",
    "grain_max_degree": 7,
    "grain_states": 50,
}


@pytest.fixture(scope="module")
def one_graph_each(fit_fedsgd):
    """FedSGD over 40 clients holding one small graph each (5 to 8 nodes, Gaussian features,
    so every node is told apart by its features): each upload is one graph's gradient, its
    nodes fewer than the GIN's 32 units. Returns the federation, the trained target and the
    first three clients whose graph is connected (the search assembles connected graphs)."""
    ds = synthetic_graphs(SyntheticGraphsParams(num_graphs=40, min_nodes=5, max_nodes=8))
    part = make_partition(ds, "iid", 40, 0, split=(1.0, 0.0, 0.0))
    federation = build_federation(ds, part)
    trained = fit_fedsgd(federation)
    connected = [
        k
        for k, c in enumerate(federation.clients)
        if len(c.train) == 1 and nx.is_connected(graph_of(c.train[0]))
    ]
    return federation, trained, connected[:3]


def graph_of(data) -> nx.Graph:
    graph = nx.Graph()
    graph.add_nodes_from(range(data.num_nodes))
    graph.add_edges_from(data.edge_index.t().tolist())
    return graph


def _attack(federation, trained, k, view=None, **params):
    attack = ATTACKS.get("structure-inversion")
    cfg = attack.Config(client=k, **(GRAIN | params))
    task = structure_challenge(federation, k, 0)
    knowledge = structure_knowledge(federation, trained, k, task)
    view = view or server_view(trained, federation)
    out = attack.run(AttackInput(view, knowledge, task.candidates), cfg, 0)
    return structure_metrics(out, task)[0], out


def _swapped(view, k: int, payload: dict):
    received = tuple(
        replace(m, payload=payload)
        if m.sender == client(k) and m.kind == MODEL_WEIGHTS and m.payload is not None
        else m
        for m in view.received
    )
    return replace(view, received=received)


def test_a_single_graphs_gradient_gives_the_graph_back_exactly(one_graph_each):
    """Every node distinct, so the labelled graph itself comes back, its update matched to
    float rounding, in 7 to 11 search states. The planted break it catches: the span read
    off the upload without taking weight decay out (lr · wd · sent, full rank) recovers
    none of the three."""
    federation, trained, clients = one_graph_each
    assert len(clients) == 3
    for k in clients:
        m, out = _attack(federation, trained, k)
        assert m["exact_rate"] == m["exact_iso_rate"] == 1.0 and m["auc"] == 1.0, (k, m)
        assert out.details["final_loss"] < 1e-8


def test_another_graphs_gradient_or_noise_gives_nothing(one_graph_each):
    """Client k's upload replaced by client j's (three clients), or by its own plus noise
    (one; the slowest: a noisy span lets every block through): no graph of k's comes back,
    and the edges rank at chance."""
    federation, trained, clients = one_graph_each
    view = server_view(trained, federation)
    ups = {m.sender: m.payload for m in view.received if m.kind == MODEL_WEIGHTS and m.payload}
    gen = torch.Generator().manual_seed(0)
    k = clients[0]
    noise = {n: w + 1e-3 * torch.randn(w.shape, generator=gen) for n, w in ups[client(k)].items()}
    swaps = [(k, noise)] + [
        (k, ups[client(j)]) for k, j in zip(clients, clients[1:] + clients[:1], strict=True)
    ]
    for k, payload in swaps:
        m, _ = _attack(federation, trained, k, _swapped(view, k, payload))
        assert m["exact_iso_rate"] == 0.0, (k, m)
        assert m["auc_ci_low"] <= 0.5 <= m["auc_ci_high"], (k, m)


def test_grain_needs_one_plain_gradient_step():
    """An Adam step rescales each weight's update on its own: no span survives it."""
    w = {"w": torch.ones(2, 2)}
    with pytest.raises(NotApplicableError, match="FedSGD"):
        gradient_spans(w, w, {"optimizer": "adam", "local_epochs": 1}, ["w"], 1e-5)


def test_exact_up_to_relabelling_counts_what_the_features_leave_open():
    """A path a–a–b (feature types 0, 0, 1): deciding the other type-0 node is the middle
    one is the same molecule, not the same labelled graph; a b in the middle is neither."""
    task = StructureChallenge(
        NodePairs(np.array([0, 0, 1]), np.array([1, 2, 2])),
        is_edge=np.array([True, False, True]),
        rows=np.arange(3),
        graph_of=np.zeros(3, dtype=int),
        kinds=np.array([0, 0, 1]),
    )

    def scored(edges):
        return structure_metrics(AttackOutput(np.array(edges, float), threshold=0.5), task)[0]

    relabelled = scored([1, 1, 0])  # edges (0, 1), (0, 2): node 0 in the middle
    assert relabelled["exact_rate"] == 0.0 and relabelled["exact_iso_rate"] == 1.0
    assert relabelled["exact_wl_rate"] == 1.0
    other = scored([0, 1, 1])  # edges (0, 2), (1, 2): the b in the middle
    assert other["exact_iso_rate"] == other["exact_wl_rate"] == 0.0


@pytest.mark.slow
def test_small_mutag_molecules_come_back_up_to_relabelling(fit_fedsgd):
    """Real MUTAG, one molecule per client (188 IID clients, every graph a training graph),
    FedSGD, GIN hidden 32: four molecules of 10 to 13 atoms come back exactly up to a
    relabelling of same-type atoms (the labelled graph cannot: two carbons give one upload),
    each in under 100 search states (about 5 s, so slow: the default tests stay cheap)."""
    from fgl_workbench.data.catalog import load_dataset

    ds = load_dataset("MUTAG")
    federation = build_federation(ds, make_partition(ds, "iid", 188, 0, split=(1.0, 0.0, 0.0)))
    trained = fit_fedsgd(federation)
    for k in (1, 2, 9, 10):
        m, out = _attack(federation, trained, k, grain_max_degree=4, grain_states=2000)
        assert m["exact_iso_rate"] == 1.0 and m["exact_rate"] == 0.0, (k, m)
        assert out.details["counts"]["grain_states"] < 100, (k, out.details)
