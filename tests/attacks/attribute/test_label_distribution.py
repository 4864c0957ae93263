"""Client label distributions from uploads: far better than the prior on skewed clients, the
prior when the uploads carry nothing, not applicable when they are encrypted."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import background_knowledge, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.attribute.label_distribution import (
    LabelDistributionConfig,
    last_round_updates,
)
from fgl_workbench.attacks.challenges import label_distribution_challenge
from fgl_workbench.attacks.metrics import distribution_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import CIPHERTEXT, Message


@pytest.fixture(scope="module")
def setting():
    ds = csbm(CSBMParams(num_nodes=1000, homophily=0.8, seed=1))
    partition = make_partition(ds, "label-dirichlet", 5, 0, params={"alpha": 0.3}, aux_fraction=0.2)
    federation = build_federation(ds, partition)
    fedavg = TARGETS.get("fedavg")
    trained = fedavg.fit(federation, fedavg.Config(rounds=20, optimizer="sgd", lr=0.5), [], 0)
    return federation, trained


def _score(setting, view=None):
    federation, trained = setting
    knowledge = background_knowledge(federation, trained)
    challenge = label_distribution_challenge(federation)
    view = view or server_view(trained, federation)
    inp = AttackInput(view, knowledge, challenge.clients)
    out = ATTACKS.get("label-distribution").run(inp, LabelDistributionConfig(), 0)
    aux = knowledge.aux_labels
    prior = np.bincount(aux, minlength=challenge.truth.shape[1]) / aux.size
    assert out.scores.shape == challenge.truth.shape
    assert np.allclose(out.scores.sum(1), 1.0)
    return distribution_metrics(out.scores, challenge.truth, prior)


def test_uploads_give_skewed_label_distributions_away(setting):
    metrics = _score(setting)
    assert metrics["tv_mean"] < metrics["tv_baseline"] - 0.15
    assert metrics["dominant_accuracy"] >= 0.6 > metrics["dominant_baseline"]


def test_uploads_that_carry_nothing_give_the_prior(setting):
    federation, trained = setting
    view = server_view(trained, federation)
    global_state, _ = last_round_updates(view)
    gen = torch.Generator().manual_seed(0)
    blank = tuple(
        replace(
            m,
            payload={
                k: v + 1e-6 * torch.randn(v.shape, generator=gen) for k, v in global_state.items()
            },
        )
        if m.payload is not None
        else m
        for m in view.received
    )
    metrics = _score(setting, replace(view, received=blank))
    assert abs(metrics["tv_mean"] - metrics["tv_baseline"]) < 0.1


def test_encrypted_uploads_are_not_applicable(setting):
    federation, trained = setting
    view = server_view(trained, federation)
    sealed = (Message(0, "client:0", "server", CIPHERTEXT, 10, b"x"),)
    with pytest.raises(NotApplicableError, match="encrypted"):
        last_round_updates(replace(view, received=sealed))


def test_the_adversary_is_told_only_which_clients_exist(setting):
    federation, trained = setting
    challenge = label_distribution_challenge(federation)
    assert challenge.clients.tolist() == list(range(5))
    knowledge = background_knowledge(federation, trained)
    client_nodes = np.concatenate([c.ids for c in federation.partition.clients])
    assert not set(knowledge.aux_ids.tolist()) & set(client_nodes.tolist())


def test_distribution_metrics():
    truth = np.array([[1.0, 0.0], [0.2, 0.8]])
    prior = np.array([0.5, 0.5])
    m = distribution_metrics(np.array([[0.9, 0.1], [0.5, 0.5]]), truth, prior)
    assert m["tv_mean"] == pytest.approx((0.1 + 0.3) / 2)
    assert m["tv_baseline"] == pytest.approx((0.5 + 0.3) / 2)
    assert m["dominant_accuracy"] == 0.5 and m["dominant_baseline"] == 0.5


def test_the_output_layer_read_includes_the_class_rows_of_the_weight():
    from fgl_workbench.attacks.attribute.label_distribution import output_bias, update_features
    from fgl_workbench.models import ModelConfig, ModelSpec

    model = ModelSpec(ModelConfig(), 10, 7, "node").build()
    old = {k: v.clone() for k, v in model.state_dict().items()}
    new = {k: v + 1.0 for k, v in old.items()}
    key = output_bias(old, 7)
    assert key == "convs.1.bias"
    assert update_features(new, old, key, "bias").tolist() == [1.0] * 7
    assert update_features(new, old, key, "output-layer").tolist() == [1.0] * 7 + [64.0] * 7


def test_the_adaptive_simulation_clips_and_noises_as_the_recipe_says():
    from fgl_workbench.attacks.attribute.label_distribution import defended_upload
    from fgl_workbench.defenses import applied
    from fgl_workbench.defenses.dp_fedavg import update_vector

    reference = {"w": torch.zeros(4), "b": torch.zeros(2)}
    state = {"w": torch.full((4,), 3.0), "b": torch.full((2,), 3.0)}
    clip = applied("gaussian-upload", {"clip": 1.0, "noise_multiplier": 1e-9})
    out = defended_upload(state, reference, (clip,), torch.Generator().manual_seed(0))
    assert update_vector(out, reference).norm().item() == pytest.approx(1.0, rel=1e-6)
    other = applied("secure-aggregation", {})
    assert defended_upload(state, reference, (other,), torch.Generator()) is state
