"""Gradient inversion: a small client's replayable first update gives its features and labels
away, a converged round's less; a heavily noised upload gives nothing beyond the prior; the
server never holds what it reconstructs."""

import numpy as np
import pytest

from fgl_workbench.adversary.threat import ServerView, client_data_knowledge, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import client_data_challenge
from fgl_workbench.attacks.metrics import (
    label_reconstruction_metrics,
    reconstruction_metrics,
    value_fractions,
)
from fgl_workbench.attacks.reconstruction.gradient_inversion import GradientInversionConfig
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.defenses import applied
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.transcript import CIPHERTEXT, Message

FEDAVG = {
    "rounds": 5,
    "local_epochs": 1,
    "optimizer": "sgd",
    "lr": 0.5,
    "keep_payloads": "first_and_last",
}
MODEL = {"hidden": 32, "dropout": 0.0}


@pytest.fixture(scope="module")
def federation():
    ds = csbm(CSBMParams(num_nodes=400, num_features=32, num_classes=3, signal=1.0, seed=1))
    part = make_partition(ds, "louvain", 30, 0, aux_fraction=0.1, split=(0.5, 0.25, 0.25))
    return build_federation(ds, part)


def _train(federation, defenses=()):
    from fgl_workbench.targets import TARGETS

    fedavg = TARGETS.get("fedavg")
    config = fedavg.Config(**FEDAVG, model=MODEL)
    return fedavg.fit(federation, config, [applied(*d) for d in defenses], 0)


@pytest.fixture(scope="module")
def trained(federation):
    return _train(federation)


def _invert(federation, trained, view=None, **params):
    cfg = GradientInversionConfig(**{"steps": 600, "round": "first", **params})
    knowledge = client_data_knowledge(federation, trained, cfg.client, cfg.structure == "known")
    view = view or server_view(trained, federation)
    out = ATTACKS.get("gradient-inversion").run(
        AttackInput(view, knowledge, np.array([cfg.client])), cfg, 0
    )
    task = client_data_challenge(federation, cfg.client)
    aux = knowledge.aux_features().numpy()
    ordered = out.details["order"] != "set"
    metrics, match = reconstruction_metrics(out.scores, task.features, aux.mean(0), ordered)
    prior = value_fractions(knowledge.aux_labels, 3)
    metrics.update(label_reconstruction_metrics(out.details["labels"][match], task.labels, prior))
    return metrics


def test_a_small_clients_first_update_gives_its_features_and_labels_away(federation, trained):
    m = _invert(federation, trained, structure="none")
    assert m["rows"] >= 3
    assert m["cosine"] > m["cosine_baseline"] + 0.3
    assert m["label_accuracy"] == 1.0


def test_a_converged_rounds_update_gives_less_away(federation, trained):
    first = _invert(federation, trained, structure="none")
    last = _invert(federation, trained, structure="none", round="last")
    assert last["cosine"] < first["cosine"] - 0.1


def test_the_known_structure_reconstructs_every_node_in_the_clients_order(federation, trained):
    """More unknowns (unlabelled nodes too), so a weaker but still informative reconstruction
    of the labelled ones."""
    m = _invert(federation, trained, structure="known")
    assert m["cosine"] > m["cosine_baseline"] + 0.03


def test_a_heavily_noised_upload_gives_nothing_beyond_the_prior(federation):
    noisy = _train(federation, [("gaussian-upload", {"clip": 1.0, "noise_multiplier": 1.0})])
    m = _invert(federation, noisy, structure="none")
    assert m["cosine"] < m["cosine_baseline"] + 0.05


def test_the_server_knows_the_clients_shape_not_its_data(federation, trained):
    knowledge = client_data_knowledge(federation, trained, 0, structure=True)
    c = federation.clients[0]
    assert not knowledge.graph.x[c.data.global_id].any()  # every node of client 0 blanked
    assert knowledge.graph.edge_index.numel() == 0  # and no population edges either
    shape = knowledge.client_shape
    assert (shape.num_nodes, shape.num_train) == (c.num_nodes, int(c.data.train_mask.sum()))
    assert (
        client_data_knowledge(federation, trained, 0, structure=False).client_shape.edge_index
        is None
    )


def test_ciphertexts_are_not_invertible(federation, trained):
    view = server_view(trained, federation)
    sealed = ServerView(
        view.level,
        view.num_classes,
        view.num_clients,
        tuple(Message(m.round, m.sender, m.receiver, CIPHERTEXT, m.nbytes) for m in view.received),
        view.spec,
        view.sent,
    )
    with pytest.raises(NotApplicableError, match="encrypted"):
        _invert(federation, trained, view=sealed)


def test_a_client_out_of_range_is_a_config_error(federation):
    with pytest.raises(ConfigError, match="attacks.params.client"):
        client_data_challenge(federation, 99)
