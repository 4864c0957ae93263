"""The canary audit through Flower's own DP code: it holds on Flower's wrappers and mod as
the ledger claims them, and catches them broken the way real DP code breaks (noise 3× too
small, one noise draw reused every round), patched into Flower's functions."""

from contextlib import contextmanager
from unittest import mock

import numpy as np
import pytest

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.audits import Context, audit_run
from fgl_workbench.defenses import AppliedDefense
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.targets.flower.engine import ledger

flwr = pytest.importorskip("flwr")
from flwr.clientapp.mod import localdp_mod  # noqa: E402
from flwr.serverapp.strategy import dp_fixed_clipping  # noqa: E402

from fgl_workbench.audits import flower as flower_audit  # noqa: E402
from fgl_workbench.targets.flower.config import FlowerConfig  # noqa: E402

ROUNDS = 10


def _audit(
    mode: str, sigma: float, clipping: str = "server", canaries: int = 1000, fraction: float = 1.0
):
    dp = DPFedAvgConfig(clip=1.0, noise_multiplier=sigma, mode=mode)
    cfg = FlowerConfig(
        rounds=ROUNDS, dp_clipping=clipping, report_metrics=False, client_fraction=fraction
    )
    claimed: PrivacyLedger = ledger(cfg, dp, canaries, ROUNDS)
    context = Context(claimed, {"dp-fedavg": dp}, 2 * canaries, None, cfg.model_dump(), "flower")
    audits = audit_run(context, [AppliedDefense("dp-fedavg", "aggregation", dp)], 1e-5, canaries)
    if mode == "local":  # each upload alone, and beside the most alike upload of its round
        return audits
    (audit,) = audits
    return audit


def _reused(real):
    """The first noise of each shape added again every later call (a tensor drawn once)."""
    kept = {}

    def add(arrays, std):
        for a in arrays:
            key = (a.shape, a.dtype)
            if key not in kept:
                kept[key] = np.random.normal(0, std, a.shape).astype(a.dtype)
            a += kept[key]

    return add


@contextmanager
def _patched(module, name, value):
    with mock.patch.object(module, name, value):
        yield


def test_flowers_central_wrapper_holds_its_zero_out_claim():
    audit = _audit("central", 6.0)
    assert audit.holds, audit.summary()
    assert "Flower server-side fixed clipping" in audit.mechanism
    assert audit.adversaries == ("clients", "querier")


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(
            _patched(
                dp_fixed_clipping,
                "compute_stdv",
                lambda s, c, n: s * c / n / 3,
            ),
            id="noise 3x too small",
        ),
        pytest.param(
            _patched(
                dp_fixed_clipping,
                "add_gaussian_noise_inplace",
                _reused(dp_fixed_clipping.add_gaussian_noise_inplace),
            ),
            id="noise reused across rounds",
        ),
    ],
)
def test_flowers_central_wrapper_broken_is_caught(broken):
    with broken:
        audit = _audit("central", 6.0)
    assert not audit.holds, audit.summary()


def test_with_half_the_clients_a_round_the_observer_uses_who_was_sampled():
    """No amplification is claimed from Flower's fixed-size draw, so the observer may know the
    sample: noise 3x too small is caught at client_fraction 0.5 too, and the correct wrapper
    holds."""
    assert _audit("central", 6.0, fraction=0.5).holds
    real = dp_fixed_clipping.compute_stdv
    with _patched(dp_fixed_clipping, "compute_stdv", lambda s, c, n: real(s, c, n) / 3):
        audit = _audit("central", 6.0, fraction=0.5)
    assert not audit.holds, audit.summary()


def test_flowers_local_dp_mod_holds_and_reused_noise_is_caught():
    assert all(a.holds for a in _audit("local", 15.0, canaries=500))
    with _patched(
        localdp_mod, "add_gaussian_noise_inplace", _reused(localdp_mod.add_gaussian_noise_inplace)
    ):
        audits = _audit("local", 15.0, canaries=500)
    assert not all(a.holds for a in audits), "\n".join(a.summary() for a in audits)


def _seeded_by_round(msg, context, call_next):
    """A client mod seeding numpy with the round before LocalDpMod draws (as a user seeding
    for reproducibility would): every client of a round adds the same noise."""
    np.random.seed(int(msg.content["config"]["server-round"]))
    return call_next(msg, context)


def test_local_dp_mod_noise_shared_by_a_rounds_clients_is_caught():
    """Each upload alone is as a correct LocalDpMod's (the own-upload audit holds); beside
    another upload of its round the shared noise cancels."""
    real = flower_audit.client_app_mods

    def mods(config, clipping):
        return [_seeded_by_round, *real(config, clipping)]

    with _patched(flower_audit, "client_app_mods", mods):
        own, across = _audit("local", 15.0, canaries=500)
    assert own.holds, own.summary()
    assert not across.holds, across.summary()
