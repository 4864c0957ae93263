"""mia-fedmia: membership from every round of the transcript, as the server (FedMIA) and as a
curious client."""

import dataclasses

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fgl_workbench.adversary.threat import background_knowledge, client_view, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import membership_challenge, others_records
from fgl_workbench.attacks.membership.all_rounds import client_models
from fgl_workbench.attacks.metrics import auc_interval, membership_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.defenses import applied
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import MODEL_WEIGHTS, SERVER

ATTACK = ATTACKS.get("mia-fedmia")
THRESHOLD = ATTACKS.get("mia-threshold")
FIT = {
    "rounds": 10,
    "local_epochs": 5,
    "weight_decay": 0.0,
    "release": "last",
    "model": {"dropout": 0.0, "hidden": 64},
    "keep_payloads": "all",
}


@pytest.fixture(scope="module")
def federation():
    """Weak features and few training nodes over four clients: the uploads memorise."""
    ds = csbm(CSBMParams(num_nodes=500, num_classes=4, num_features=256, signal=0.1, seed=1))
    part = make_partition(ds, "metis", 4, seed=0, split=(0.15, 0.15, 0.7), aux_fraction=0.3)
    return build_federation(ds, part)


@pytest.fixture(scope="module")
def trained(federation):
    return TARGETS.get("fedavg").fit(federation, FIT, [], seed=0)


def run(attack, view, fed, trained, challenge, **params):
    inp = AttackInput(view, background_knowledge(fed, trained), challenge.candidates)
    out = attack.run(inp, attack.Config(**params), 0)
    return out, membership_metrics(out.scores, challenge.is_member, out.threshold)[0]


def replaced(view, kind_sender, payload):
    """``view`` with the payload of every message ``kind_sender(m)`` picks replaced by
    ``payload(m)``."""
    received = tuple(
        dataclasses.replace(m, payload=payload(m)) if kind_sender(m) else m for m in view.received
    )
    return dataclasses.replace(view, received=received)


def untrained(trained, m):
    """A freshly initialised model's weights, one draw per message."""
    torch.manual_seed(1000 * m.round + sum(map(ord, m.sender)))
    return trained.spec.build().state_dict()


def test_server_finds_the_members_in_every_clients_uploads(federation, trained):
    challenge = membership_challenge(federation, 0)
    out, metrics = run(ATTACK, server_view(trained, federation), federation, trained, challenge)
    assert metrics["auc_ci_low"] > 0.65, metrics
    per_model = out.details["per_model"]
    assert sorted(per_model) == [f"client:{k}" for k in range(4)]
    np.testing.assert_array_equal(out.scores, np.max(list(per_model.values()), axis=0))


def test_server_finds_members_the_last_uploads_forgot(federation, trained):
    """Every client's last upload replaced by an untrained model (a record memorised early,
    forgotten by the end): the last-upload attack is at chance, the rounds before still
    give the members away."""
    challenge = membership_challenge(federation, 0)
    last = max(m.round for m in trained.transcript.messages)
    view = replaced(
        server_view(trained, federation),
        lambda m: m.kind == MODEL_WEIGHTS and m.round == last,
        lambda m: untrained(trained, m),
    )
    out, _ = run(THRESHOLD, view, federation, trained, challenge, adversary="server")
    low, high = auc_interval(out.scores, challenge.is_member)
    assert low < 0.5 < high, (low, high)
    _, metrics = run(ATTACK, view, federation, trained, challenge)
    assert metrics["auc_ci_low"] > 0.65, metrics


def test_client_finds_the_other_clients_members_in_the_global_models(federation, trained):
    challenge = others_records(membership_challenge(federation, 0), 1)
    view = client_view(trained, federation, 1)
    out, metrics = run(ATTACK, view, federation, trained, challenge, adversary="client", client=1)
    assert metrics["auc_ci_low"] > 0.65, metrics
    assert "per_model" not in out.details  # one sequence of global models


def test_server_reads_each_upload_against_the_model_it_started_from(federation, trained):
    """``reference: start``: how far each client's training moved the margin beyond the
    pool's move; it needs no other uploader, so two clients suffice."""
    challenge = membership_challenge(federation, 0)
    view = server_view(trained, federation)
    out, metrics = run(ATTACK, view, federation, trained, challenge, reference="start")
    assert metrics["auc_ci_low"] > 0.65, metrics
    assert sorted(out.details["per_model"]) == [f"client:{k}" for k in range(4)]


def test_reference_start_needs_the_global_models_the_server_sent(federation, trained):
    challenge = membership_challenge(federation, 0)
    view = dataclasses.replace(server_view(trained, federation), sent=())
    with pytest.raises(NotApplicableError, match="global model the server sent"):
        run(ATTACK, view, federation, trained, challenge, reference="start")


@pytest.mark.parametrize(
    ("adversary", "reference"), [("server", "others"), ("server", "start"), ("client", "others")]
)
def test_no_signal_from_uploads_that_never_trained(federation, trained, adversary, reference):
    """Every model the adversary reads replaced by an untrained one: real members and
    non-members, no model that saw either."""
    challenge = membership_challenge(federation, 0)
    view = server_view(trained, federation)
    if adversary == "client":
        challenge = others_records(challenge, 0)
        view = client_view(trained, federation, 0)
    view = replaced(view, lambda m: m.kind == MODEL_WEIGHTS, lambda m: untrained(trained, m))
    if adversary == "server":  # the global models the server sent too
        sent = tuple(dataclasses.replace(m, payload=untrained(trained, m)) for m in view.sent)
        view = dataclasses.replace(view, sent=sent)
    params = {"adversary": adversary, "reference": reference}
    out, _ = run(ATTACK, view, federation, trained, challenge, **params)
    low, high = auc_interval(out.scores, challenge.is_member)
    assert low < 0.5 < high, (low, high)


def test_same_seed_same_scores(federation, trained):
    challenge = membership_challenge(federation, 0)
    view = server_view(trained, federation)
    first, _ = run(ATTACK, view, federation, trained, challenge, combine="fisher")
    again, _ = run(ATTACK, view, federation, trained, challenge, combine="fisher")
    np.testing.assert_array_equal(first.scores, again.scores)


def test_needs_every_rounds_payloads_unless_windowed(federation):
    """The target's default keeps only the last round's payloads: every round is refused,
    naming the setting; the last round alone is read."""
    trained = TARGETS.get("fedavg").fit(federation, {**FIT, "keep_payloads": "last_round"}, [], 0)
    challenge = membership_challenge(federation, 0)
    for view, adversary in [
        (server_view(trained, federation), "server"),
        (client_view(trained, federation, 0), "client"),
    ]:
        with pytest.raises(NotApplicableError, match="keep_payloads: all"):
            run(ATTACK, view, federation, trained, challenge, adversary=adversary)
    _, metrics = run(
        ATTACK, server_view(trained, federation), federation, trained, challenge, window=1
    )
    assert metrics["auc"] > 0.5


def test_fewer_than_three_uploaders_is_not_applicable_but_the_start_reference_is(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0, aux_fraction=0.2))
    trained = TARGETS.get("fedavg").fit(fed, {"rounds": 2, "keep_payloads": "all"}, [], 0)
    challenge = membership_challenge(fed, 0)
    with pytest.raises(NotApplicableError, match="three clients"):
        run(ATTACK, server_view(trained, fed), fed, trained, challenge)
    out, _ = run(ATTACK, server_view(trained, fed), fed, trained, challenge, reference="start")
    assert sorted(out.details["per_model"]) == ["client:0", "client:1"]


def test_secure_aggregation_hides_the_uploads_not_the_global_models(small_csbm):
    """Under FedAvg's secure aggregation the server holds ciphertexts only; a client decrypts
    each round's aggregate and rebuilds every global model, the last one the released one."""
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, 0, aux_fraction=0.2))
    cfg = {"rounds": 3, "local_epochs": 1, "keep_payloads": "all", "release": "last"}
    trained = TARGETS.get("fedavg").fit(fed, cfg, [applied("secure-aggregation", {})], 0)
    challenge = membership_challenge(fed, 0)
    with pytest.raises(NotApplicableError, match="encrypted"):
        run(ATTACK, server_view(trained, fed), fed, trained, challenge)
    view = client_view(trained, fed, 0)
    states = client_models(view, background_knowledge(fed, trained), ATTACK.Config())
    assert len(states) == cfg["rounds"] + 1
    released = trained.global_model.state_dict()
    for key, value in states[-1].items():
        torch.testing.assert_close(value, released[key], atol=1e-5, rtol=1e-4)
    assert not any(
        m.sender == SERVER and m.kind == MODEL_WEIGHTS and m.round > 0 for m in view.received
    )
    out, _ = run(ATTACK, view, fed, trained, others_records(challenge, 0), adversary="client")
    assert np.isfinite(out.scores).all()


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="window"):
        ATTACK.Config(window=0)
    with pytest.raises(ValidationError, match="variance"):
        ATTACK.Config(variance="per-client")
    with pytest.raises(ValidationError, match="rounds"):
        ATTACK.Config(rounds=3)  # not a field: extra="forbid"


def descended(trained, fed, start, k, pick, step=1e-2):
    """The model ``start`` moved one gradient step down the summed loss of client ``k``'s
    records ``pick`` picks (each node alone, as a 0-hop query sends it)."""
    ids = torch.as_tensor(pick(fed.partition.clients[k]))
    model = trained.spec.build()
    model.load_state_dict(start)
    model.eval()
    data = fed.dataset.data
    edges = torch.zeros(2, 0, dtype=torch.long)
    torch.nn.functional.cross_entropy(
        model(data.x[ids], edges), data.y[ids], reduction="sum"
    ).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return {n: t - step * grads[n] if n in grads else t for n, t in start.items()}


def planted_view(fed, trained, pick):
    """The server's view with every upload replaced by one gradient step from the global
    model it started from, down the loss of the client's records ``pick`` picks."""
    view = server_view(trained, fed)
    start = {m.round: m.payload for m in view.sent if m.kind == MODEL_WEIGHTS}
    sender = lambda m: int(m.sender.split(":")[1])  # noqa: E731
    return replaced(
        view,
        lambda m: m.kind == MODEL_WEIGHTS and m.sender != SERVER,
        lambda m: descended(trained, fed, start[m.round], sender(m), pick),
    )


GRADIENT = {"signal": "gradient", "window": 1}


def test_gradient_signal_finds_the_members_a_planted_update_descended(federation, trained):
    """Each upload is exactly one gradient step down its client's members' loss: a member's
    own descent direction is a summand of the update, so its cosine with it stands out (AUC
    0.90 [0.85, 0.94]; with the cosine's sign flipped 0.42 [0.32, 0.51], with the scores
    shuffled 0.46 [0.38, 0.56], and the test fails)."""
    challenge = membership_challenge(federation, 0)
    view = planted_view(federation, trained, lambda c: c.train)
    _, metrics = run(ATTACK, view, federation, trained, challenge, **GRADIENT)
    assert metrics["auc_ci_low"] > 0.75, metrics


@pytest.mark.slow  # 23 s: per-record gradients; its planted pair stays in the default run
def test_gradient_signal_holds_chance_when_the_update_descended_neither_side(federation, trained):
    """The same uploads, stepped down the loss of the clients' validation nodes: neither
    members nor non-members of the challenge ([0.39, 0.56])."""
    challenge = membership_challenge(federation, 0)
    view = planted_view(federation, trained, lambda c: c.val)
    out, _ = run(ATTACK, view, federation, trained, challenge, **GRADIENT)
    low, high = auc_interval(out.scores, challenge.is_member)
    assert low < 0.5 < high, (low, high)


@pytest.mark.slow  # 0.9 and 0.3 s on an idle core; the planted pair above is the check
@pytest.mark.parametrize("adversary", ["server", "client"])
def test_gradient_signal_on_a_trained_federation(federation, trained, adversary):
    """The real uploads (server) or global models (client 1, on the others' records): AUC
    0.86 [0.81, 0.90] and 0.87 [0.81, 0.92] on the last round."""
    challenge = membership_challenge(federation, 0)
    view = server_view(trained, federation)
    if adversary == "client":
        challenge = others_records(challenge, 1)
        view = client_view(trained, federation, 1)
    params = {**GRADIENT, "adversary": adversary, "client": 1}
    _, metrics = run(ATTACK, view, federation, trained, challenge, **params)
    assert metrics["auc_ci_low"] > 0.6, metrics
