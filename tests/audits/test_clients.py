"""The local games' blind spot, closed: noise that every client of a round shares (each
client's generator seeded alike, say by the round) leaves each upload's own evidence exactly
as a correct mechanism's, yet cancels between two uploads of the round. The audit reads each
upload beside the most alike one of its round (``Projections.across``) and catches it."""

from __future__ import annotations

import pytest
import torch

from fgl_workbench.audits.canary import NULLS, canary_directions
from fgl_workbench.audits.clients import ACROSS, Projections
from fgl_workbench.audits.demonstration import demonstrate
from fgl_workbench.audits.stored import audit_row
from fgl_workbench.defenses import noise

LOCAL = "dp-fedavg local, q 0.2, 10 rounds, σ 15"


def _shared_by_round(m: int, flipped: bool):
    """``noise.gaussian`` drawing once per round of ``m`` uploads, every client of the round
    adding that same draw (fresh the next round); ``flipped``: every other client adds it
    negated."""
    real, calls, kept = noise.gaussian, [0], {}

    def draw(shape, std, generator, dtype=torch.float64):
        block, client = divmod(calls[0], m)
        calls[0] += 1
        if block not in kept:
            kept[block] = real(shape, std, generator, dtype)
        return kept[block] * (-1.0 if flipped and client % 2 else 1.0)

    return draw


@pytest.mark.parametrize("flipped", [False, True])
def test_noise_shared_by_a_rounds_clients_is_caught_beside_another_upload(monkeypatch, flipped):
    m = 500
    monkeypatch.setattr(noise, "gaussian", _shared_by_round(m, flipped))
    own, across = demonstrate(LOCAL, canaries=m)
    assert own.holds, own.summary()  # each upload alone looks correct: the old blind spot
    assert across.mechanism.endswith(ACROSS) and not across.holds, across.summary()


def test_a_correct_mechanism_holds_beside_another_upload():
    own, across = demonstrate(LOCAL, canaries=500)
    assert own.holds and across.holds, across.summary()
    assert across.bounds.canaries == 500 and across.held_out is None  # coupled canaries
    # a trial without the held-out test is stored and summarised like any (μ crashed once)
    row = audit_row(across)
    assert row["mu"] == across.bounds.mu and "μ" in across.summary()


def test_each_upload_is_read_beside_the_one_whose_noise_is_most_alike():
    """Two pairs of uploads share their noise, each pair unknown to the observer: each
    upload's partner is found from the null projections, and the difference is the
    canary's own contribution alone."""
    generator = torch.Generator().manual_seed(0)
    d, nulls, _ = canary_directions(4, 4 + NULLS + 8, generator)
    own = Projections(1, 4, d, nulls)
    shared = [torch.randn(d.shape[1], generator=generator, dtype=torch.float64) for _ in (0, 1)]
    contribution = torch.tensor([1.0, -1.0, 1.0, 1.0])
    for i, pair in enumerate([0, 1, 1, 0]):
        own.add(0, i, contribution[i] * d[i] + shared[pair])
    observed = own.across(torch.ones(1, 4, dtype=torch.bool), torch.ones(1, 4), 1.0)
    assert torch.allclose(observed.signal[0], contribution.double())
    assert torch.allclose(observed.null, torch.zeros_like(observed.null))
