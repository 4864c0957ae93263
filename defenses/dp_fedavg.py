"""Client-level DP-FedAvg (McMahan et al. 2018): each sampled client's model update is clipped
to L2 norm ``clip`` over all parameters; Gaussian noise of standard deviation
``noise_multiplier · clip`` is added to the sum (``central``: by the trusted server) or to every
update before it leaves the client (``local``: the server only ever sees noisy updates).

Neighbouring datasets differ in one client's entire data. Clients are sampled independently
with probability q per round (Poisson, which the subsampled-Gaussian accountant assumes, rather
than FedAvg's fixed-size draw), and the noisy sum is divided by the expected count q·K (the
fixed-denominator estimator), so one client moves the average by at most clip / (q·K).

Whom the ε protects (``ledger_events``):
- central: the noise on the sum (σ·clip) is there whoever was sampled, so for other clients
  and a querier of the released model, who do not see the sample, each round is one
  SubsampledGaussian(q, σ) (add or remove one client). The server adds the noise itself and
  sees the clean updates (or, under secure aggregation, can subtract its own noise from the
  released model): no guarantee against it.
- local: a client's noise enters the sum only when the client does (in a round where nobody
  else uploads, the sum is exactly zero without it), so adding or removing a client changes
  the noise, not only its mean: no add-or-remove bound, amplified or not, holds for anyone.
  Neighbours replace one client's data, which moves its clipped update by up to 2·clip; the
  server sees each noisy update (std σ·clip) of the rounds the client took part in (under
  secure aggregation only the sum of the n_r noisy updates of round r, std σ·clip·√n_r), and
  everyone else sees post-processing of that: one Gaussian at sensitivity 2·clip per round,
  no amplification, counted for the client with the most such rounds.

``target_epsilon`` (instead of ``noise_multiplier``, ``fgl_workbench.running.calibration``): σ is
the smallest whose ledger's largest finite ε meets the target. Central: that is the other clients'
and the querier's ε, exact (q and the rounds are known before training); the server's stays ∞
whatever σ. Local: everyone's, planned for a client that takes part in every round, so the real ε is
at most the target (equal when ``client_fraction`` is 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from pydantic import ConfigDict, Field

from fgl_workbench.accountants import ADVERSARIES, Gaussian, NoGuarantee, Scope, SubsampledGaussian
from fgl_workbench.defenses import noise
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.defenses.calibration import NoiseOrEpsilon, target_epsilon_field

State = dict[str, torch.Tensor]


class DPFedAvgConfig(NoiseOrEpsilon):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    clip: float = Field(1.0, gt=0.0, description="L2 bound on one client's update")
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / clip")
    target_epsilon: float | None = target_epsilon_field()
    mode: Literal["central", "local"] = "central"


def poisson_clients(rng: np.random.Generator, num_clients: int, q: float) -> np.ndarray:
    """The clients taking part in a round: each independently with probability q (Poisson),
    the sampling the subsampled-Gaussian accountant assumes; sorted indices."""
    return np.flatnonzero(rng.random(num_clients) < q)


def update_vector(local: State, reference: State) -> torch.Tensor:
    """local − reference over every floating-point tensor, flattened in key order."""
    keys = [k for k in reference if reference[k].is_floating_point()]
    return torch.cat([(local[k].double() - reference[k].double()).reshape(-1) for k in keys])


def clip_to_norm(vector: torch.Tensor, clip: float) -> torch.Tensor:
    return vector * min(1.0, clip / max(float(vector.norm()), 1e-12))


def client_update(
    local: State, reference: State, cfg: DPFedAvgConfig, generator: torch.Generator
) -> torch.Tensor:
    """What a client contributes: its clipped update, noised already in local mode."""
    update = clip_to_norm(update_vector(local, reference), cfg.clip)
    if cfg.mode == "local":
        update = update + _noise(update.numel(), cfg, generator)
    return update


def server_aggregate(
    reference: State,
    updates: Sequence[torch.Tensor],
    cfg: DPFedAvgConfig,
    expected_clients: float,
    generator: torch.Generator,
) -> State:
    """The next global model: reference + (Σ updates [+ noise, central mode]) / (q·K)."""
    size = update_vector(reference, reference).numel()
    total = torch.zeros(size, dtype=torch.float64)
    for u in updates:
        total += u
    noise = server_noise(size, cfg, generator)
    if noise is not None:
        total += noise
    return apply_update(reference, total / expected_clients)


def server_noise(size: int, cfg: DPFedAvgConfig, generator: torch.Generator) -> torch.Tensor | None:
    """The noise the server adds to the sum: σ·C per coordinate in central mode, none in local."""
    return _noise(size, cfg, generator) if cfg.mode == "central" else None


def _noise(size: int, cfg: DPFedAvgConfig, generator: torch.Generator) -> torch.Tensor:
    return noise.gaussian((size,), cfg.noise_multiplier * cfg.clip, generator)


def apply_update(reference: State, update: torch.Tensor) -> State:
    """reference + update, unflattened; non-float tensors (counters) are kept as they are."""
    out, start = {}, 0
    for k, v in reference.items():
        if not v.is_floating_point():
            out[k] = v.clone()
            continue
        n = v.numel()
        out[k] = (v.double() + update[start : start + n].reshape(v.shape)).to(v.dtype)
        start += n
    return out


def aggregate_mean(total: torch.Tensor, dp: bool, expected_clients: float) -> torch.Tensor:
    """The mean update a decrypted secure aggregate stands for. Under DP-FedAvg the sum of the
    clipped updates over the expected number of clients (a data-independent denominator);
    otherwise the weighted sum over the summed weights, which travel as its last entry, and
    no update where they sum to 0 (no chosen client held a training record). The weights are
    example counts: a sum below 1/2 is 0 plus CKKS's decryption error."""
    if dp:
        return total / expected_clients
    if float(total[-1]) < 0.5:
        return torch.zeros_like(total[:-1])
    return total[:-1] / total[-1]


HIDDEN_SAMPLE = "add or remove one client; the sample is hidden"
VISIBLE_SAMPLE = "replace one client's data; its participation is visible"
REPLACE = "replace one client's data"


def ledger_events(
    q: float, cfg: DPFedAvgConfig, rounds: int, server_load: float, secure: bool
) -> tuple[SubsampledGaussian, NoGuarantee] | tuple[Gaussian]:
    """Central: (the event for other clients and the querier, the server's). Local: one event
    for everyone.

    ``server_load``: the largest, over clients, of Σ over the rounds it took part in of 1
    (each noisy update seen) or, under secure aggregation, 1/n_r (only the round's sum)."""
    if cfg.mode == "central":
        hidden = SubsampledGaussian(
            q,
            cfg.noise_multiplier,
            rounds,
            scope=Scope("client", HIDDEN_SAMPLE, ("clients", "querier")),
        )
        why = (
            "central DP-FedAvg: the server adds the noise, so it can remove it from what it learns"
            if secure
            else "central DP-FedAvg: the server adds the noise and sees the clean updates"
        )
        return hidden, NoGuarantee(why, Scope("client", VISIBLE_SAMPLE, ("server",)))
    std = cfg.noise_multiplier * cfg.clip / max(server_load, 1e-300) ** 0.5
    scope = Scope("client", REPLACE, ADVERSARIES, "no amplification: local noise reveals presence")
    return (Gaussian(std, 2 * cfg.clip, int(server_load > 0), scope=scope),)


class DPFedAvg:
    name = "dp-fedavg"
    stage = "aggregation"
    Config = DPFedAvgConfig

    def privacy_unit(self, config: DPFedAvgConfig) -> PrivacyUnit | None:
        return "client"


DEFENSES.register("dp-fedavg")(DPFedAvg())
