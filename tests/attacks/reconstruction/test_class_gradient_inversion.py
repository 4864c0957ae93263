"""Inverting FedGC's per-class gradient uploads: exact for one isolated node, labels given away
by the counts, features of a client's rare classes recovered far beyond the prior; the server
works from θ_t, the uploads and the counts, never from the client's data."""

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import client_data_knowledge, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import client_data_challenge
from fgl_workbench.attacks.metrics import reconstruction_metrics, singleton_metrics
from fgl_workbench.attacks.reconstruction.class_gradient_inversion import (
    ClassGradientInversionConfig,
    rank_one_rows,
)
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.fedgc.condensation import class_gradients, random_gcn, receptive_field


def test_one_isolated_node_is_recovered_exactly():
    theta = [p.double() for p in random_gcn(12, 16, 3, torch.Generator().manual_seed(0))]
    x = torch.rand(1, 12, dtype=torch.float64)
    field = receptive_field(
        x, torch.eye(1, dtype=torch.float64), torch.tensor([2]), torch.ones(1, dtype=torch.bool)
    )
    grads = class_gradients(theta, field)
    torch.testing.assert_close(rank_one_rows(grads[2]), x[0])


def _cell(avg_degree: float):
    params = CSBMParams(num_nodes=300, num_classes=3, num_features=16, signal=0.2, seed=4)
    ds = csbm(params.model_copy(update={"avg_degree": avg_degree}))
    fed = build_federation(
        ds, make_partition(ds, "label-dirichlet", 3, 0, aux_fraction=0.1, split=(0.1, 0.2, 0.7))
    )
    fedgc = TARGETS.get("fedgc")
    cfg = {
        "rounds": 4,
        "matching_hidden": 32,
        "model": {"hidden": 16},
        "eval_iterations": 10,
        "checkpoints": 1,
        "exchange_hops": 0,
    }
    return fed, fedgc.fit(fed, fedgc.Config(**cfg), [], 0)


@pytest.fixture(scope="module")
def cell():
    return _cell(6.0)


@pytest.fixture(scope="module")
def isolated():
    """Almost no edges: a gradient is then its own nodes' alone."""
    return _cell(0.01)


def _invert(fed, trained, k, **params):
    cfg = ClassGradientInversionConfig(client=k, **params)
    knowledge = client_data_knowledge(fed, trained, k, structure=False)
    out = ATTACKS.get("class-gradient-inversion").run(
        AttackInput(server_view(trained, fed), knowledge, np.array([k])), cfg, 0
    )
    task = client_data_challenge(fed, k)
    prior = knowledge.aux_features().numpy().mean(0)
    metrics, match = reconstruction_metrics(out.scores, task.features, prior, ordered=False)
    return out, task, metrics, match


@pytest.mark.parametrize("method", ["analytic", "optimise"])
def test_labels_exact_and_features_beyond_the_prior(cell, method):
    fed, trained = cell
    for k in range(3):
        out, task, metrics, match = _invert(fed, trained, k, method=method, steps=100)
        assert np.array_equal(np.sort(out.details["labels"]), np.sort(task.labels))
        assert metrics["cosine"] > metrics["cosine_baseline"] + 0.05, (k, metrics)


def test_a_single_isolated_node_of_its_class_is_given_away(isolated):
    """With neighbours a node's gradient blends their features in (the GCN's receptive
    field); without, one node's gradient is its features exactly."""
    fed, trained = isolated
    found = False
    for k in range(3):
        out, task, _, match = _invert(fed, trained, k)
        m = singleton_metrics(out.scores, task.features, match, out.details["class_size"])
        if m["cosine_singleton"] is not None:
            found = True
            assert m["cosine_singleton"] > 0.99, m
            if m["cosine_grouped"] is not None:
                assert m["cosine_grouped"] < m["cosine_singleton"]
    assert found, "the federation should have a client with a single-node class"


def test_not_applicable_without_per_class_gradients(cell):
    fed, _ = cell
    fedavg = TARGETS.get("fedavg").fit(fed, {"rounds": 2}, [], 0)
    with pytest.raises(NotApplicableError, match="per-class gradients"):
        _invert(fed, fedavg, 0)


def test_reads_only_its_view_and_the_auxiliary_pool(cell):
    """Every population row outside the attacker's pool replaced by noise: the same output."""
    import dataclasses

    fed, trained = cell
    cfg = ClassGradientInversionConfig(client=1, method="optimise", steps=20)
    knowledge = client_data_knowledge(fed, trained, 1, structure=False)
    graph = knowledge.graph.clone()
    outside = np.setdiff1d(np.arange(graph.num_nodes), knowledge.aux_ids)
    graph.x[torch.from_numpy(outside)] = torch.randn(outside.size, graph.x.shape[1])
    attack, view = ATTACKS.get("class-gradient-inversion"), server_view(trained, fed)
    outs = [
        attack.run(AttackInput(view, k, np.array([1])), cfg, 0)
        for k in (knowledge, dataclasses.replace(knowledge, graph=graph))
    ]
    np.testing.assert_array_equal(outs[0].scores, outs[1].scores)
