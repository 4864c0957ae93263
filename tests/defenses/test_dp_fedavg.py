import numpy as np
import pytest
import torch

from accountants import PrivacyLedger, SubsampledGaussian, epsilon
from defenses import applied
from defenses.dp_fedavg import (
    DPFedAvgConfig,
    client_update,
    server_aggregate,
    update_vector,
)
from workbench.data.federation import build_federation
from workbench.data.partition import make_partition
from workbench.targets import TARGETS
from workbench.transcript import MODEL_WEIGHTS, SERVER


def states(seed: int, scale: float) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    ref = {"w": torch.randn(5, 3, generator=g), "b": torch.randn(3, generator=g)}
    ref["n"] = torch.tensor(7)  # an integer buffer: never clipped, noised or averaged
    local = {
        k: v + scale * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
        for k, v in ref.items()
    }
    return local, ref


def test_clipping_bounds_every_client_contribution():
    cfg = DPFedAvgConfig(clip=0.5, noise_multiplier=1.0, mode="central")
    gen = torch.Generator().manual_seed(0)
    for seed in range(20):
        local, ref = states(seed, scale=float(seed))
        update = client_update(local, ref, cfg, gen)
        assert float(update.norm()) <= 0.5 + 1e-9
        raw = update_vector(local, ref)
        if float(raw.norm()) <= 0.5:  # small updates pass unchanged
            torch.testing.assert_close(update, raw)


def test_server_sums_updates_over_the_expected_count():
    cfg = DPFedAvgConfig(clip=100.0, noise_multiplier=1.0, mode="local")  # no server noise
    _, ref = states(0, 0.0)
    updates = [torch.full((18,), float(i), dtype=torch.float64) for i in range(3)]
    new = server_aggregate(ref, updates, cfg, expected_clients=4.0, generator=torch.Generator())
    torch.testing.assert_close(new["w"].double(), ref["w"].double() + 3 / 4)
    assert new["n"] == ref["n"]


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "metis", 4, 0))


def fit(federation, mode: str, sigma: float = 1.1):
    dp = applied("dp-fedavg", {"clip": 0.5, "noise_multiplier": sigma, "mode": mode})
    cfg = {"rounds": 6, "local_epochs": 1, "client_fraction": 0.5, "keep_payloads": "all"}
    return TARGETS.get("fedavg").fit(federation, cfg, [dp], seed=0)


def test_ledger_gives_the_accountants_epsilon(federation):
    trained = fit(federation, "central")
    by_hand = epsilon(PrivacyLedger((SubsampledGaussian(0.5, 1.1, 6),)), 1e-5).epsilon
    assert epsilon(trained.ledger, 1e-5).epsilon == pytest.approx(by_hand, rel=1e-12)
    assert trained.recipe.defenses[0].name == "dp-fedavg"  # references train with it too


def test_local_mode_uploads_only_noisy_models(federation):
    trained = fit(federation, "local", sigma=2.0)
    sent = {m.round: m.payload for m in trained.transcript.messages if m.receiver != SERVER}
    for m in trained.transcript.received_by(SERVER):
        assert m.kind == MODEL_WEIGHTS
        delta = update_vector(m.payload, sent[m.round])
        # clipped to 0.5, then noise of std 2 · 0.5 per coordinate: far beyond the clip
        assert float(delta.norm()) > 5 * 0.5
        assert np.sqrt(delta.numel()) * 0.8 < float(delta.norm()) < np.sqrt(delta.numel()) * 1.2


def test_poisson_client_sampling(federation):
    trained = fit(federation, "central")
    counts = {
        len([m for m in trained.transcript.received_by(SERVER) if m.round == r]) for r in range(6)
    }
    assert len(counts) > 1  # the number of clients varies by round under Poisson sampling
