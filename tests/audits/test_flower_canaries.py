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
    (audit,) = audit_run(context, [AppliedDefense("dp-fedavg", "aggregation", dp)], 1e-5, canaries)
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
    assert _audit("local", 15.0, canaries=500).holds
    with _patched(
        localdp_mod, "add_gaussian_noise_inplace", _reused(localdp_mod.add_gaussian_noise_inplace)
    ):
        audit = _audit("local", 15.0, canaries=500)
    assert not audit.holds, audit.summary()
