"""The flower target under Flower's SecAgg+: the same model as without it (to quantisation
error), every stage's messages in the transcript, no upload the server can read, the
aggregate as the server's one model, and the ledger per adversary."""

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fgl_workbench.accountants import epsilons_by_adversary
from fgl_workbench.adversary.threat import background_knowledge, server_view
from fgl_workbench.attacks.attribute.label_distribution import last_round_updates
from fgl_workbench.attacks.base import AttackInput
from fgl_workbench.attacks.membership.observe import (
    AGGREGATED,
    observed_apis,
    uploaded_weights,
)
from fgl_workbench.attacks.reconstruction.gradient_inversion import observed_round
from fgl_workbench.defenses import AppliedDefense, applied
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.privacy import SECAGG_SERVER
from fgl_workbench.transcript import (
    AGGREGATE,
    MASKED_WEIGHTS,
    METRICS,
    MODEL_WEIGHTS,
    PUBLIC_KEY,
    SECAGG_CONFIG,
    SERVER,
)

pytest.importorskip("flwr")

CONFIG = {"model": {"arch": "gcn", "hidden": 16}, "rounds": 2, "local_epochs": 2}
SECAGG = {"secure_aggregation": "secaggplus"}
STAGES = {SECAGG_CONFIG, PUBLIC_KEY, "key_shares", MASKED_WEIGHTS, "survivors", "unmask_shares"}


def _fit(federation, defenses=(), **config):
    return TARGETS.get("flower").fit(
        federation, {**CONFIG, **config, "keep_payloads": "all"}, list(defenses), 0
    )


def _dp(**params):
    return applied("dp-fedavg", params)


@pytest.fixture(scope="module")
def runs(federation):
    return _fit(federation), _fit(federation, **SECAGG)


def test_secaggplus_releases_the_plain_model_to_quantisation_error(federation, runs):
    plain, secure = runs
    a, b = plain.global_model.state_dict(), secure.global_model.state_dict()
    gaps = [float((a[k] - b[k]).abs().max()) for k in a]
    # Flower's grid: 2·8/2^22 ≈ 4e-6 per parameter and weight; a mask left on would be ~2^32
    assert 0.0 < max(gaps) < 1e-4
    # the legacy workflow's history: the same losses and validation accuracies each round
    for p, q in zip(plain.history, secure.history, strict=True):
        assert q["train_loss"] == pytest.approx(p["train_loss"], rel=1e-4)
        assert q["val_accuracy"] == pytest.approx(p["val_accuracy"], abs=0.01)
    # fresh keys and masks from the OS every run, the same seeded rounding: the masks cancel
    # exactly, so the same seed gives the same model bit for bit
    again = _fit(federation, **SECAGG).global_model.state_dict()
    assert all(torch.equal(again[k], b[k]) for k in b)


def test_every_stage_is_recorded_and_no_readable_upload_reaches_the_server(runs):
    plain, secure = runs
    messages = secure.transcript.messages
    for r in (0, 1):
        kinds = {m.kind for m in messages if m.round == r}
        assert kinds >= STAGES
        assert [m.kind for m in messages if m.round == r and m.sender == m.receiver] == [AGGREGATE]
    up = [m for m in messages if m.receiver == SERVER and m.sender != SERVER]
    assert {m.kind for m in up} == {
        PUBLIC_KEY,
        "key_shares",
        MASKED_WEIGHTS,
        "unmask_shares",
        METRICS,
    }
    for m in up:
        assert m.nbytes > 0
    # the masked vector is on the wire as 64-bit integers: more than the plain float upload
    plain_up = next(
        m for m in plain.transcript.messages if m.kind == MODEL_WEIGHTS and m.receiver == SERVER
    )
    masked = next(m for m in up if m.kind == MASKED_WEIGHTS)
    assert masked.nbytes > plain_up.nbytes
    # the aggregate the server unmasks in the last round is the model it releases
    last = [m for m in messages if m.kind == AGGREGATE][-1].payload
    released = secure.global_model.state_dict()
    assert all(float((last[k] - released[k]).abs().max()) < 1e-6 for k in released)


def test_server_attacks_on_single_uploads_refuse_and_those_on_the_aggregate_run(federation, runs):
    _, secure = runs
    view = server_view(secure, federation)
    for attempt in (
        lambda: uploaded_weights(view, "mia-source"),
        lambda: observed_round(view, 0),
        lambda: last_round_updates(view),
    ):
        with pytest.raises(NotApplicableError, match=r"secure aggregation \(SecAgg\+\)"):
            attempt()
    inp = AttackInput(view, background_knowledge(federation, secure), np.zeros(0))
    apis = observed_apis(inp, "mia-threshold")
    assert list(apis) == [AGGREGATED]


def test_ledger_scopes_secaggplus_per_adversary(federation):
    flower = TARGETS.get("flower")
    central = flower.planned_ledger(
        federation,
        {**CONFIG, **SECAGG, "dp_clipping": "client"},
        [_dp(clip=1.0, noise_multiplier=2.0)],
    )
    plain = flower.planned_ledger(
        federation, {**CONFIG, "dp_clipping": "client"}, [_dp(clip=1.0, noise_multiplier=2.0)]
    )
    rows = {r.adversary: r for r in epsilons_by_adversary(central, 1e-5)}
    base = {r.adversary: r for r in epsilons_by_adversary(plain, 1e-5)}
    assert rows["server"].epsilon == float("inf") and SECAGG_SERVER in rows["server"].note
    assert "training loss" in rows["server"].note  # metrics still go up in the clear
    # the rounding's extra sensitivity: a hair more ε than without SecAgg+, still finite
    assert base["querier"].epsilon < rows["querier"].epsilon < 1.01 * base["querier"].epsilon
    assert rows["clients"].epsilon == rows["querier"].epsilon
    local = flower.planned_ledger(
        federation, {**CONFIG, **SECAGG}, [_dp(mode="local", clip=1.0, noise_multiplier=2.0)]
    )
    local_plain = flower.planned_ledger(
        federation, CONFIG, [_dp(mode="local", clip=1.0, noise_multiplier=2.0)]
    )
    assert local.events == local_plain.events  # the per-upload guarantee, no amplification


def test_flowers_dp_mods_run_inside_secaggplus(federation):
    central = _fit(
        federation, [_dp(clip=0.5, noise_multiplier=0.5)], dp_clipping="client", **SECAGG
    )
    local = _fit(
        federation,
        [_dp(mode="local", clip=0.5, noise_multiplier=0.5)],
        report_metrics=False,  # the metrics alone would leave the server unbounded
        **SECAGG,
    )
    for trained in (central, local):
        assert np.isfinite(trained.utility["accuracy"])
        assert not [
            m
            for m in trained.transcript.messages
            if m.kind == MODEL_WEIGHTS and m.receiver == SERVER
        ]
    rows = {r.adversary: r for r in epsilons_by_adversary(local.ledger, 1e-5)}
    assert np.isfinite(rows["server"].epsilon)  # LocalDpMod's noise is on every upload
    assert rows["server"].epsilon == rows["querier"].epsilon


def test_what_flower_cannot_run_with_secaggplus_is_refused(federation):
    flower = TARGETS.get("flower")
    dp = [_dp(clip=1.0, noise_multiplier=1.0)]
    with pytest.raises(ConfigError, match="dp_clipping: server cannot run"):
        flower.planned_ledger(federation, {**CONFIG, **SECAGG}, dp)
    with pytest.raises(ConfigError, match="client_fraction"):
        flower.planned_ledger(federation, {**CONFIG, **SECAGG, "client_fraction": 0.34}, [])
    wrapping = {**CONFIG, **SECAGG, "secaggplus": {"quantization_range": 2**31}}
    with pytest.raises(ConfigError, match="secaggplus.quantization_range"):
        flower.planned_ledger(federation, wrapping, [])
    low = {**CONFIG, **SECAGG, "secaggplus": {"max_weight": 10.0}}  # clients send ~130
    with pytest.raises(ConfigError, match="secaggplus.max_weight"):
        _fit(federation, **low)
    for bad in ({"num_shares": 2}, {"reconstruction_threshold": 3, "num_shares": 3}):
        with pytest.raises(ValidationError, match="num_shares|reconstruction_threshold"):
            FlowerConfig(secaggplus=bad)


@pytest.mark.slow
def test_secaggplus_on_flowers_simulation_engine_matches_inline(federation, runs):
    """SecAgg+'s stages between the ServerApp and ClientApps on Ray actors (each node's mod
    state in its context): the inline run's model to quantisation error (the rounding draws
    on the actors), the same parties and kinds once the nodes said which client they are."""
    _, inline = runs
    simulated = _fit(federation, backend="simulation", **SECAGG)
    a, b = inline.global_model.state_dict(), simulated.global_model.state_dict()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4
    parties = {(m.sender, m.receiver, m.kind) for m in simulated.transcript.messages}
    assert parties == {(m.sender, m.receiver, m.kind) for m in inline.transcript.messages}


def test_the_canary_audit_of_a_secaggplus_cell_says_it_plays_flowers_dp_without_it():
    from fgl_workbench.audits import Context, audit_run
    from fgl_workbench.targets.flower.engine import ledger

    dp = DPFedAvgConfig(clip=1.0, noise_multiplier=1.0)
    cfg = FlowerConfig(rounds=2, dp_clipping="client", report_metrics=False, **SECAGG)
    context = Context(
        ledger(cfg, dp, 100, 2, 1000), {"dp-fedavg": dp}, 200, None, cfg.model_dump(), "flower"
    )
    (audit,) = audit_run(context, [AppliedDefense("dp-fedavg", "aggregation", dp)], 1e-5, 100)
    assert "SecAgg+ not played" in audit.mechanism
