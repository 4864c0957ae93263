"""The canary audit can fail: on every DP defense, a deliberately broken mechanism (noise 10×
smaller than the ledger says, clipping off) gets a lower bound above the claimed ε, and the
correct mechanism's bound stays below it."""

from __future__ import annotations

import pytest

from accountants import PrivacyLedger
from audits import GAMES, Context, audit_run
from defenses import aggregation_perturbation as ap
from defenses import dp_fedavg, dp_sgd, gaussian_upload, metric_dp
from defenses.base import AppliedDefense

DELTA, CANARIES, DIMENSION = 1e-5, 500, 2000


def _fedavg(mode: str, sigma: float):
    cfg = dp_fedavg.DPFedAvgConfig(clip=1.0, noise_multiplier=sigma, mode=mode)
    return cfg, PrivacyLedger(dp_fedavg.ledger_events(0.2, cfg, 10, 2.0, False)), None


def _dp_sgd(group: int):
    cfg = dp_sgd.DPSGDConfig(clip=1.0, noise_multiplier=3.0 * group, sample_rate=0.1)
    return cfg, PrivacyLedger((dp_sgd.ledger_event(cfg, 50, group=group),)), None


def _upload(neighbouring: str):
    cfg = gaussian_upload.GaussianUploadConfig(
        clip=1.0, noise_multiplier=5.0, neighbouring=neighbouring
    )
    return cfg, PrivacyLedger(gaussian_upload.ledger_events(cfg, 3)), None


def _ap(level: str):
    cfg = ap.APConfig(noise_multiplier=6.0 if level == "edge" else 4.0, level=level, max_degree=4)
    return cfg, PrivacyLedger(ap.ledger_events(cfg, 2)), None


def _metric():
    cfg = metric_dp.MetricDPConfig(sigma0=1.2)
    return cfg, PrivacyLedger((metric_dp.ledger_event(cfg),)), 0.5


CASES = {
    "dp-fedavg central": ("dp-fedavg", lambda: _fedavg("central", 3.0)),
    "dp-fedavg local": ("dp-fedavg", lambda: _fedavg("local", 15.0)),
    "dp-sgd record": ("dp-sgd", lambda: _dp_sgd(1)),
    "dp-sgd group of 2": ("dp-sgd", lambda: _dp_sgd(2)),
    "gaussian-upload replace": ("gaussian-upload", lambda: _upload("replace")),
    "gaussian-upload add-remove": ("gaussian-upload", lambda: _upload("add-remove")),
    "aggregation-perturbation edge": ("aggregation-perturbation", lambda: _ap("edge")),
    "aggregation-perturbation node": ("aggregation-perturbation", lambda: _ap("node")),
    "metric-dp": ("metric-dp", _metric),
}


def _audit(case: str, broken: bool):
    name, make = CASES[case]
    cfg, ledger, rho = make()
    context = Context(ledger, {name: cfg}, DIMENSION, rho)
    return audit_run(context, [AppliedDefense(name, "upload", cfg)], DELTA, CANARIES, 0, broken)


def test_every_game_is_tested():
    assert {name for name, _ in CASES.values()} == set(GAMES)


@pytest.mark.parametrize("case", CASES)
def test_broken_mechanism_is_caught_and_the_correct_one_holds(case):
    correct, broken = _audit(case, False), _audit(case, True)
    assert correct and len(correct) == len(broken)
    for ok in correct:
        assert ok.holds, ok.summary()
        assert 0.1 < ok.claimed < 2.5  # a claim the canaries can reach
    # every claim a game audits: the broken mechanism's bound is above the stated ε
    for bad in broken:
        assert not bad.holds, bad.summary()


def test_the_audit_runs_the_defense_code(monkeypatch):
    """No broken config: the noise function itself is sabotaged, the claim is unchanged, and
    the audit (which calls the defense's own mechanism) catches it."""
    real = dp_fedavg._noise
    monkeypatch.setattr(dp_fedavg, "_noise", lambda size, cfg, gen: real(size, cfg, gen) / 10)
    (bad,) = [a for a in _audit("dp-fedavg central", False)]
    assert not bad.holds, bad.summary()


def test_server_claims_are_audited_without_amplification():
    """Local DP-FedAvg: one trial for the parties who do not see the sample, one for the
    server (replace one client, no amplification); central mode claims nothing against the
    server, so nothing is audited for it."""
    local = {a.adversaries for a in _audit("dp-fedavg local", False)}
    central = {a.adversaries for a in _audit("dp-fedavg central", False)}
    assert local == {("clients", "querier"), ("server",)}
    assert central == {("clients", "querier")}


def test_same_seed_same_bound():
    first, second = _audit("dp-sgd record", True), _audit("dp-sgd record", True)
    assert [a.bound for a in first] == [a.bound for a in second]


def test_a_run_without_the_mechanism_is_refused():
    cfg = dp_sgd.DPSGDConfig()
    context = Context(PrivacyLedger(), {"dp-sgd": cfg}, 10, None)
    with pytest.raises(ValueError, match="no DP-SGD event"):
        audit_run(context, [AppliedDefense("dp-sgd", "local_training", cfg)], DELTA, 50)
