"""Feature inversion (CE-FedGNN Eq. 32): released embeddings of a known model give the
nodes' features back, beyond the nearest-neighbour baseline; embeddings that carry nothing
give the prior; the adversary never holds the target nodes' features."""

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import InsiderView, feature_knowledge, insider_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import feature_challenge
from fgl_workbench.attacks.metrics import reconstruction_metrics
from fgl_workbench.attacks.reconstruction.feature_inversion import FeatureInversionConfig


def _invert(setting, view=None, **params):
    federation, trained, _ = setting
    cfg = FeatureInversionConfig(**params)
    task = feature_challenge(federation, 0, max_nodes=60)
    knowledge = feature_knowledge(federation, trained, task.nodes, cfg.known_edges, 0)
    view = view or insider_view(trained, federation, cfg.source)
    inp = AttackInput(view, knowledge, task.nodes)
    out = ATTACKS.get("feature-inversion").run(inp, cfg, 0)
    prior = knowledge.aux_features().numpy().mean(0)
    return reconstruction_metrics(out.scores, task.features, prior)[0]


@pytest.mark.parametrize("source", ["release", "served"])
def test_released_embeddings_give_features_back(setting, source):
    inverted = _invert(setting, source=source, known_edges=1.0)
    nearest = _invert(setting, source=source, known_edges=1.0, method="nearest-neighbour")
    assert inverted["cosine"] > inverted["cosine_baseline"] + 0.3
    assert inverted["cosine"] > nearest["cosine"] + 0.1
    if source == "release":  # the adversary's graph is the one the release was computed on
        assert inverted["mse"] < 0.5 * min(nearest["mse"], inverted["mse_baseline"])


class NoiseEmbeddings:
    def embeddings(self, node_ids, hops=0):
        return torch.randn(len(node_ids), 64, generator=torch.Generator().manual_seed(3))


def test_embeddings_that_carry_nothing_give_the_prior(setting):
    federation, trained, _ = setting
    real = insider_view(trained, federation, "release")
    view = InsiderView(real.level, real.num_classes, real.model, NoiseEmbeddings())
    m = _invert(setting, view=view)
    assert m["cosine"] < m["cosine_baseline"] + 0.1


def test_the_adversary_never_holds_the_target_features(setting):
    federation, trained, _ = setting
    task = feature_challenge(federation, 0, max_nodes=60)
    knowledge = feature_knowledge(federation, trained, task.nodes, 0.5, 0)
    assert not knowledge.graph.x[torch.from_numpy(task.nodes)].any()
    others = np.setdiff1d(np.arange(federation.dataset.num_items), task.nodes)
    x = federation.dataset.data.x
    assert torch.equal(knowledge.graph.x[others], x[others])
    full = federation.dataset.data.edge_index.shape[1]
    assert 0.3 * full < knowledge.graph.edge_index.shape[1] < 0.7 * full


def _invert_exchanged(federation, trained, **params):
    cfg = FeatureInversionConfig(source="exchanged", known_edges=1.0, **params)
    view = insider_view(trained, federation, "exchanged", cfg.combine)
    task = feature_challenge(federation, 0, max_nodes=60, among=view.api.nodes)
    assert np.isin(task.nodes, view.api.nodes).all()  # asked only about exchanged nodes
    knowledge = feature_knowledge(federation, trained, task.nodes, cfg.known_edges, 0)
    assert not knowledge.graph.x[torch.from_numpy(task.nodes)].any()
    out = ATTACKS.get("feature-inversion").run(AttackInput(view, knowledge, task.nodes), cfg, 0)
    prior = knowledge.aux_features().numpy().mean(0)
    return reconstruction_metrics(out.scores, task.features, prior)[0]


def test_the_server_inverts_exchanged_embeddings_and_averaging_beats_their_noise(
    exchanged_setting,
):
    federation, clean, noisy = exchanged_setting
    exchanged = _invert_exchanged(federation, clean)
    nearest = _invert_exchanged(federation, clean, method="nearest-neighbour")
    assert exchanged["cosine"] > exchanged["cosine_baseline"] + 0.3
    assert exchanged["cosine"] > nearest["cosine"] + 0.1
    last = _invert_exchanged(federation, noisy)
    mean = _invert_exchanged(federation, noisy, combine="mean")
    assert last["cosine"] < last["cosine_baseline"] + 0.05  # one noisy release: nothing
    assert mean["cosine"] > last["cosine"] + 0.15  # ~20 releases averaged: noise / √20
