"""Client-level DP-FedAvg (McMahan et al. 2018): each sampled client's model update is clipped
to L2 norm ``clip`` over all parameters; Gaussian noise of standard deviation
``noise_multiplier · clip`` is added to the sum (``central``: by the trusted server) or to every
update before it leaves the client (``local``: the server only ever sees noisy updates).

Neighbouring datasets differ in one client's entire data. Clients are sampled independently
with probability q per round (Poisson, which the subsampled-Gaussian accountant assumes, rather
than FedAvg's fixed-size draw), and the noisy sum is divided by the expected count q·K (the
fixed-denominator estimator), so one client moves the average by at most clip / (q·K). Each
round is one SubsampledGaussian(q, σ) event; in local mode each update carries its own noise,
so the same event bounds every client's release with √(q·K) times more noise on the average."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from accountants import SubsampledGaussian
from defenses.base import DEFENSES, PrivacyUnit

State = dict[str, torch.Tensor]


class DPFedAvgConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    clip: float = Field(1.0, gt=0.0, description="L2 bound on one client's update")
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / clip")
    mode: Literal["central", "local"] = "central"


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
    std = cfg.noise_multiplier * cfg.clip
    return std * torch.randn(size, generator=generator, dtype=torch.float64)


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


def ledger_event(q: float, cfg: DPFedAvgConfig, rounds: int) -> SubsampledGaussian:
    return SubsampledGaussian(q, cfg.noise_multiplier, rounds)


class DPFedAvg:
    name = "dp-fedavg"
    stage = "aggregation"
    Config = DPFedAvgConfig

    def privacy_unit(self, config: DPFedAvgConfig) -> PrivacyUnit | None:
        return "client"


DEFENSES.register("dp-fedavg")(DPFedAvg())
