import math
from collections import Counter

import numpy as np
import pytest
import torch

from fgl_workbench.accountants import (
    ADVERSARIES,
    Gaussian,
    PrivacyLedger,
    SubsampledGaussian,
    epsilon,
    epsilons_by_adversary,
)
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.dp_fedavg import (
    DPFedAvgConfig,
    client_update,
    ledger_events,
    server_aggregate,
    update_vector,
)
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import MODEL_WEIGHTS, SERVER


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


def by_adversary(trained, delta=1e-5) -> dict[str, float]:
    return {r.adversary: r.epsilon for r in epsilons_by_adversary(trained.ledger, delta)}


def test_central_mode_protects_everyone_but_the_server(federation):
    """The server adds the noise: it sees clean updates (it was once printed the querier's ε)."""
    trained = fit(federation, "central")
    by_hand = epsilon(PrivacyLedger((SubsampledGaussian(0.5, 1.1, 6),)), 1e-5).epsilon
    eps = by_adversary(trained)
    assert eps["querier"] == pytest.approx(by_hand, rel=1e-12)
    assert eps["clients"] == pytest.approx(by_hand, rel=1e-12)
    assert eps["server"] == math.inf
    assert trained.recipe.defenses[0].name == "dp-fedavg"  # references train with it too


def test_local_mode_accounts_everyone_without_amplification():
    """The issue's example: q = 0.1, σ = 1, 100 rounds printed 7.9 for everyone. Every round
    a client took part in is a Gaussian at sensitivity 2·clip, for everyone: the server sees
    who was sampled, and a client's own noise reveals its presence to the others too (the
    add-or-remove bound with amplification held for nobody)."""
    cfg = DPFedAvgConfig(clip=1.0, noise_multiplier=1.0, mode="local")
    (event,) = ledger_events(0.1, cfg, 100, server_load=14, secure=False)
    rows = {r.adversary: r.epsilon for r in epsilons_by_adversary(PrivacyLedger((event,)), 1e-5)}
    expected = epsilon(PrivacyLedger((Gaussian(1.0, 2.0, 14),)), 1e-5).epsilon
    assert rows == pytest.approx({"server": expected, "clients": expected, "querier": expected})
    assert expected > 19  # not the 7.9 once printed
    # under secure aggregation only each round's sum of n_r noisy updates is seen
    (summed,) = ledger_events(0.1, cfg, 100, server_load=14 / 5, secure=True)
    assert epsilons_by_adversary(PrivacyLedger((summed,)), 1e-5)[0].epsilon < expected


def test_local_mode_counts_the_rounds_each_client_took_part_in(federation):
    trained = fit(federation, "local", sigma=2.0)
    rounds = Counter(m.sender for m in trained.transcript.received_by(SERVER))
    (event,) = trained.ledger.events
    assert set(event.scope.adversaries) == set(ADVERSARIES)
    assert event.count == 1 and event.sensitivity == 1.0  # 2 · clip
    assert event.sigma == pytest.approx(2.0 * 0.5 / np.sqrt(max(rounds.values())))


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
