"""The flower target: Flower's strategy and apps train FedAvg, every message is recorded as
the server received it, and Flower's DP wrappers and mods act as the ledger says."""

import sys

import numpy as np
import pytest
import torch

from fgl_workbench.accountants import epsilons_by_adversary
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import AppliedDefense, applied
from fgl_workbench.defenses.dp_fedavg import update_vector
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import METRICS, MODEL_WEIGHTS, SERVER

pytest.importorskip("flwr")

CONFIG = {"model": {"arch": "gcn", "hidden": 16}, "rounds": 3, "local_epochs": 2}


def _fit(federation, defenses=(), seed=0, **config):
    return TARGETS.get("flower").fit(
        federation, {**CONFIG, **config, "keep_payloads": "all"}, list(defenses), seed
    )


def _dp(**params):
    return applied("dp-fedavg", params)


@pytest.fixture(scope="module")
def plain(federation):
    return _fit(federation, rounds=10)


def _uploads(trained, r):
    return [
        m
        for m in trained.transcript.messages
        if m.receiver == SERVER and m.round == r and m.kind == MODEL_WEIGHTS
    ]


def _train_requests(trained, r):
    """Each client's train request of round r: the first model it was sent that round (the
    evaluate request after it carries the round's new aggregate)."""
    sent = {}
    for m in trained.transcript.messages:
        if m.sender == SERVER and m.round == r and m.kind == MODEL_WEIGHTS:
            sent.setdefault(m.receiver, m.payload)
    return sent


def test_flower_fedavg_learns_and_releases_the_weighted_mean_of_what_the_server_received(
    federation, plain
):
    assert plain.utility["accuracy"] > 0.6  # the built-in FedAvg's 0.71 at this seed
    last = _uploads(plain, 9)
    assert len(last) == 3
    weights = {f"client:{k}": float(c.num_nodes) for k, c in enumerate(federation.clients)}
    total = sum(weights.values())
    released = plain.global_model.state_dict()
    for key, value in released.items():
        mean = sum(weights[m.sender] * m.payload[key].double() for m in last) / total
        assert torch.allclose(value.double(), mean, atol=1e-5)


def test_every_message_is_recorded_with_its_serialised_size(plain):
    messages = plain.transcript.messages
    per_round = {(m.sender == SERVER, m.kind) for m in messages if m.round == 0}
    assert per_round == {(True, MODEL_WEIGHTS), (False, MODEL_WEIGHTS), (False, METRICS)}
    for m in messages:
        if m.kind == MODEL_WEIGHTS:
            raw = sum(t.numel() * t.element_size() for t in m.payload.values())
            assert raw < m.nbytes < raw + 4096  # the protobuf's framing, not an estimate
    # train and evaluate requests go down every round: the model twice per client
    down = [m for m in messages if m.sender == SERVER and m.round == 0]
    assert len(down) == 6
    reported = [m.payload for m in messages if m.kind == METRICS and m.round == 0]
    assert any("train_loss" in p for p in reported) and any("accuracy" in p for p in reported)


def test_same_seed_same_numbers(federation, plain):
    again = _fit(federation, rounds=10)
    assert again.utility == plain.utility
    other = _fit(federation, seed=1, rounds=10)
    assert other.utility != plain.utility


def test_server_side_clipping_lets_the_server_see_raw_updates_client_side_clipped_ones(
    federation,
):
    clip = 0.01
    for side, most in (("server", None), ("client", clip)):
        trained = _fit(federation, [_dp(clip=clip, noise_multiplier=0.5)], dp_clipping=side)
        sent = _train_requests(trained, 1)
        norms = [
            float(update_vector(m.payload, sent[m.sender]).norm()) for m in _uploads(trained, 1)
        ]
        if most is None:
            assert min(norms) > 10 * clip  # unclipped: the server clips after receiving
        else:
            assert max(norms) <= clip * (1 + 1e-4)


def test_central_dp_is_scoped_per_adversary_with_flowers_epsilon_beside(federation):
    trained = _fit(federation, [_dp(clip=1.0, noise_multiplier=2.0)])
    rows = {r.adversary: r for r in epsilons_by_adversary(trained.ledger, 1e-5)}
    assert rows["server"].epsilon == float("inf")
    assert "raw update" in rows["server"].note and "training loss" in rows["server"].note
    assert np.isfinite(rows["querier"].epsilon)
    assert rows["querier"].epsilon == rows["clients"].epsilon
    # Flower's accountant: the same Gaussian composition (dp_accounting's RDP conversion)
    assert trained.utility["flower_epsilon"] == pytest.approx(rows["querier"].epsilon, rel=0.01)


def test_local_dp_runs_flowers_local_dp_mod_on_every_upload(federation):
    dp = _dp(clip=0.5, noise_multiplier=2.0, mode="local")
    trained = _fit(federation, [dp], report_metrics=False)
    updates = torch.cat(
        [
            update_vector(m.payload, _train_requests(trained, r)[m.sender])
            for r in range(3)
            for m in _uploads(trained, r)
        ]
    )  # clipped to 0.5, then noise of std σ·C = 1 on every coordinate
    assert float(updates.std()) == pytest.approx(1.0, rel=0.08)
    rows = {r.adversary: r for r in epsilons_by_adversary(trained.ledger, 1e-5)}
    assert all(np.isfinite(r.epsilon) for r in rows.values())  # no metrics reported
    assert rows["server"].epsilon == rows["querier"].epsilon
    reported = [m.payload for m in trained.transcript.messages if m.kind == METRICS]
    assert all(p == {"num-examples": 1.0} for p in reported)


def test_metrics_reported_under_local_dp_void_the_guarantee_against_the_server(federation):
    dp = _dp(clip=0.5, noise_multiplier=2.0, mode="local")
    trained = _fit(federation, [dp], rounds=1)
    rows = {r.adversary: r for r in epsilons_by_adversary(trained.ledger, 1e-5)}
    assert rows["server"].epsilon == float("inf")
    assert np.isfinite(rows["querier"].epsilon)


def test_defenses_flower_does_not_run_are_refused(federation):
    ib = AppliedDefense("secure-aggregation", "aggregation", None)
    with pytest.raises(ConfigError, match="flower runs Flower's own DP code"):
        _fit(federation, [ib])


def test_without_flower_installed_the_error_says_how_to_install_it(federation, monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(ConfigError, match=r"fgl-workbench\[flower\]"):
        _fit(federation)


def test_graph_level_federations_run_on_flower(small_graphs):
    federation = build_federation(small_graphs, make_partition(small_graphs, "iid", 3, seed=0))
    trained = TARGETS.get("flower").fit(
        federation, {"model": {"arch": "gin", "hidden": 16}, "rounds": 2, "local_epochs": 1}, [], 0
    )
    assert 0.0 <= trained.utility["accuracy"] <= 1.0
    assert len(_uploads(trained, 1)) == 3


@pytest.mark.slow
def test_flowers_simulation_engine_gives_the_inline_grids_numbers(federation):
    """The ClientApps on Ray actors (state in each node's context, a seeded stream per client
    and round) train the same models under Flower's server-side DP (its noise drawn in the
    ServerApp's process, seeded as inline); the transcript names the same clients once the nodes
    have said which they are."""
    dp = [_dp(clip=1.0, noise_multiplier=0.5)]  # server-side DP, as the done-when test's
    inline = _fit(federation, dp, rounds=2)
    simulated = _fit(federation, dp, rounds=2, backend="simulation")
    assert simulated.utility == inline.utility
    assert simulated.ledger == inline.ledger
    parties = {(m.sender, m.receiver, m.kind) for m in simulated.transcript.messages}
    assert parties == {(m.sender, m.receiver, m.kind) for m in inline.transcript.messages}


def test_fedprox_sends_its_mu_and_the_clients_stay_near_the_global_model(federation):
    def drift(trained):
        r = 2
        sent = _train_requests(trained, r)
        return sum(
            float(update_vector(m.payload, sent[m.sender]).norm()) for m in _uploads(trained, r)
        )

    fedavg = _fit(federation)
    fedprox = _fit(federation, strategy="fedprox", proximal_mu=100.0)
    assert drift(fedprox) < 0.5 * drift(fedavg)  # μ = 100 reached the clients' gradients


def test_fedprox_pulls_each_round_towards_that_rounds_model_only(federation):
    """A client's module is kept across rounds: the proximal hooks of a round (anchored at
    its global model) go once it ends, or the next round's gradient would carry both terms.
    The same training asked twice gives the same model."""
    from flwr.app import Context, RecordDict

    from fgl_workbench.models import ModelSpec
    from fgl_workbench.targets.fedavg.node import NodeFedAvg
    from fgl_workbench.targets.flower.apps import Clients
    from fgl_workbench.targets.flower.config import FlowerConfig

    cfg = FlowerConfig(**CONFIG, strategy="fedprox", optimizer="sgd", lr=0.5)
    ds = federation.dataset
    spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, ds.level)
    clients = Clients(NodeFedAvg(), federation.clients, spec, cfg, 0)
    start = spec.build().state_dict()

    def trained() -> dict[str, torch.Tensor]:
        context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})
        config = {"server-round": 1, "proximal-mu": 10.0}
        state = clients.fit(0, start, config, context, True)[0]
        return {k: v.clone() for k, v in state.items()}  # the kept module's own tensors

    first, second = trained(), trained()
    assert any(not torch.equal(first[k], start[k]) for k in start)
    assert all(torch.equal(first[k], second[k]) for k in first)
