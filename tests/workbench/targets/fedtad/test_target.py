"""The FedTAD target end to end on a small CSBM federation: reliabilities uploaded once and
kept for the server's view, the distillation moves the global model, the recipe retrains
FedTAD, and defenses that hide individual models are refused."""

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import background_knowledge, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.attribute.uploaded_distribution import UploadedDistributionConfig
from fgl_workbench.attacks.reconstruction.gradient_inversion import observed_round
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.defenses import applied
from fgl_workbench.errors import ConfigError
from fgl_workbench.query import NodeQueryAPI
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import RELIABILITY

SHORT = {"rounds": 3, "outer_steps": 1, "student_steps": 2, "pseudo_nodes": 30}


@pytest.fixture(scope="module")
def federation():
    ds = csbm(CSBMParams(num_nodes=300, num_classes=3, seed=4))
    return build_federation(ds, make_partition(ds, "label-dirichlet", 3, 0, aux_fraction=0.1))


@pytest.fixture(scope="module")
def trained(federation):
    fedtad = TARGETS.get("fedtad")
    return fedtad.fit(federation, fedtad.Config(**SHORT), [], 0)


def test_reliabilities_are_uploaded_once_and_the_server_keeps_them(trained, federation):
    sent = [m for m in trained.transcript.messages if m.kind == RELIABILITY]
    assert [m.round for m in sent] == [0, 0, 0] and all(m.payload is not None for m in sent)
    view = server_view(trained, federation)
    out = ATTACKS.get("uploaded-label-distribution").run(
        AttackInput(view, background_knowledge(federation, trained), np.arange(3)),
        UploadedDistributionConfig(reads="reliability"),
        0,
    )
    assert np.allclose(out.scores.sum(1), 1.0)
    assert trained.recipe.target == "fedtad" and 0.0 <= trained.utility["accuracy"] <= 1.0


def test_distillation_moves_the_global_model(trained, federation):
    fedtad = TARGETS.get("fedtad")
    plain = fedtad.fit(federation, fedtad.Config(**{**SHORT, "outer_steps": 0}), [], 0)
    a, b = trained.global_model.state_dict(), plain.global_model.state_dict()
    assert any(not (a[k] == b[k]).all() for k in a)


def test_same_seed_same_model(trained, federation):
    fedtad = TARGETS.get("fedtad")
    again = fedtad.fit(federation, fedtad.Config(**SHORT), [], 0)
    a, b = trained.global_model.state_dict(), again.global_model.state_dict()
    assert all((a[k] == b[k]).all() for k in a)


def test_defenses_that_hide_individual_models_are_refused(federation):
    fedtad = TARGETS.get("fedtad")
    with pytest.raises(ConfigError, match="secure-aggregation"):
        fedtad.fit(federation, fedtad.Config(**SHORT), [applied("secure-aggregation", {})], 0)


def test_the_servers_first_round_holds_weights_beside_the_reliabilities(trained, federation):
    sent, upload = observed_round(server_view(trained, federation), 0, "first")
    assert set(sent) == set(upload) == set(trained.global_model.state_dict())


def test_under_gaussian_upload_the_reliabilities_leave_noised_and_are_counted(federation):
    """The reliability vector is computed from a client's labels, features and edges: under
    gaussian-upload it is clipped and noised like the updates, and the ledger counts it (one
    upload more than the rounds)."""
    from fgl_workbench.accountants import Gaussian, epsilon

    fedtad = TARGETS.get("fedtad")
    upload = applied("gaussian-upload", {"clip": 1.0, "noise_multiplier": 2.0})
    plain = fedtad.fit(federation, fedtad.Config(**SHORT), [], 0)
    noisy = fedtad.fit(federation, fedtad.Config(**SHORT), [upload], 0)
    clean = [m.payload for m in plain.transcript.messages if m.kind == RELIABILITY]
    sent = [m.payload for m in noisy.transcript.messages if m.kind == RELIABILITY]
    assert all(not np.allclose(a.numpy(), b.numpy()) for a, b in zip(clean, sent, strict=True))
    (event,) = noisy.ledger.events
    assert isinstance(event, Gaussian) and event.count == SHORT["rounds"] + 1
    planned = fedtad.planned_ledger(federation, fedtad.Config(**SHORT), [upload])
    assert epsilon(planned, 1e-5).epsilon == pytest.approx(epsilon(noisy.ledger, 1e-5).epsilon)


def test_fine_tuning_after_fedtad_deploys_each_clients_own_model(trained, federation):
    """O-pFGL's "FedTAD + FT" baseline: the distilled global model, then each client's own
    fine-tuned copy answers for that client's nodes."""
    fedtad = TARGETS.get("fedtad")
    stage = {"lr": 0.01, "epochs": 30, "eval_every": 5}
    tuned = fedtad.fit(federation, {**SHORT, "fine_tune": stage}, [], 0)
    assert tuned.utility["global_accuracy"] == trained.utility["accuracy"]  # the same rounds
    start = tuned.global_model.state_dict()
    moved = [
        any(not torch.equal(v, start[n]) for n, v in m.state_dict().items())
        for m in tuned.client_models.values()
    ]
    assert any(moved), "no client's fine-tuning beat the global model: nothing was routed"
    owner = federation.partition.owner(federation.dataset.num_items)
    for k, model in tuned.client_models.items():
        ids = np.flatnonzero(owner == k)[:10]
        own = NodeQueryAPI(model, federation.dataset.data).logits(ids, 2)
        torch.testing.assert_close(tuned.query.logits(ids, 2), own)
