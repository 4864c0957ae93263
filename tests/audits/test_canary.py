"""The canary audit's shape: the correct mechanism's bound stays below its claim, the audit
runs the defenses' own code, each claim is audited against its own adversaries, and every
audit states its ceiling (the breaks it catches: test_breaks.py)."""

from __future__ import annotations

import pytest
import torch

from fgl_workbench.accountants import ADVERSARIES, PrivacyLedger
from fgl_workbench.audits import GAMES, Context, audit_run
from fgl_workbench.audits.canary import canary_directions
from fgl_workbench.audits.demonstration import CASES, DELTA, demonstrate
from fgl_workbench.defenses import dp_fedavg, dp_sgd
from fgl_workbench.defenses.base import AppliedDefense

CENTRAL, LOCAL = (next(n for n in CASES if n.startswith(f"dp-fedavg {m}")) for m in ("c", "l"))


def test_every_game_is_demonstrated():
    assert {CASES[name]().defense for name in CASES} == set(GAMES)


@pytest.mark.parametrize("name", CASES)
def test_the_correct_mechanism_holds_under_a_reachable_ceiling(name):
    correct = demonstrate(name)
    assert correct
    for ok in correct:
        assert ok.holds, ok.summary()
        assert 0.1 < ok.claimed < 2.5  # a claim the canaries can reach
        assert ok.ceiling > 1.5 * ok.claimed, ok.summary()  # a violation could be certified


def test_the_audit_runs_the_defense_code(monkeypatch):
    """The noise function itself is sabotaged, the claim is unchanged, and the audit (which
    calls the defense's own mechanism) catches it."""
    real = dp_fedavg._noise
    monkeypatch.setattr(dp_fedavg, "_noise", lambda size, cfg, gen: real(size, cfg, gen) / 10)
    (bad,) = demonstrate(CENTRAL)
    assert not bad.holds, bad.summary()


def test_local_noise_is_audited_for_everyone_without_amplification():
    """Local DP-FedAvg claims a replace-one bound against every party, audited from the
    uploads the server sees; central mode claims nothing against the server, so its one
    trial is for the parties who do not see the sample."""
    local = {frozenset(a.adversaries) for a in demonstrate(LOCAL)}
    central = {a.adversaries for a in demonstrate(CENTRAL)}
    assert local == {frozenset(ADVERSARIES)}
    assert central == {("clients", "querier")}


def test_same_seed_same_bound():
    name = next(n for n in CASES if n.startswith("dp-sgd,"))
    assert [a.bounds for a in demonstrate(name)] == [a.bounds for a in demonstrate(name)]


def test_a_mechanism_that_did_not_run_is_not_audited():
    cfg = dp_sgd.DPSGDConfig()
    context = Context(PrivacyLedger(), {"dp-sgd": cfg}, 10, None)
    assert audit_run(context, [AppliedDefense("dp-sgd", "local_training", cfg)], DELTA, 50) == []


def test_a_runs_bounds_share_the_confidence():
    """Every bound of one run holds together at 95 %: with three audited trials (DP-SGD, and
    the Gaussian upload on each upload and beside another upload, in one FedAvg run) each is
    at 1 − 5/3 %."""
    sgd, upload = (
        CASES["dp-sgd, q 0.1, 50 steps, σ 3"](),
        CASES["gaussian-upload, 3 uploads, σ 5"](),
    )
    ledger = PrivacyLedger(sgd.ledger.events + upload.ledger.events)
    defenses = [AppliedDefense(c.defense, "upload", c.config) for c in (sgd, upload)]
    context = Context(ledger, {c.defense: c.config for c in (sgd, upload)}, 500)
    audits = audit_run(context, defenses, DELTA, 100)
    assert [a.defense for a in audits] == ["dp-sgd", "gaussian-upload", "gaussian-upload"]
    assert all(a.confidence == pytest.approx(1 - 0.05 / 3) for a in audits)


def test_too_few_canaries_are_not_certifiable():
    """Two canaries cannot certify any ε at 95 %: the audit says so instead of printing a
    bound of 0 that reads like a measurement."""
    (audit,) = demonstrate(CENTRAL, canaries=2)
    assert audit.ceiling == 0 and not audit.certifiable
    assert "not certifiable at this size" in audit.summary()


def test_canaries_are_independent_coordinates_where_the_vector_has_room():
    generator = torch.Generator().manual_seed(0)
    d, nulls, independent = canary_directions(100, 200, generator)
    both = torch.cat([d, nulls])
    assert independent
    assert both.sum(dim=1).eq(1).all() and both.abs().sum(dim=0).le(1).all()  # distinct axes
    d, _, independent = canary_directions(200, 200, generator)
    assert not independent and torch.allclose(d.norm(dim=1), torch.ones(200, dtype=d.dtype))


def test_independent_canaries_get_the_held_out_test_and_dense_ones_do_not():
    name = "dp-sgd, q 0.1, 50 steps, σ 3"
    (coordinates,) = demonstrate(name, canaries=300)
    (dense,) = demonstrate(name, canaries=300, dimension=300)
    assert coordinates.held_out is not None and "independent" in coordinates.mechanism
    assert dense.held_out is None
