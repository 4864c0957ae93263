"""The Gaussian mechanism on any uploaded tensor (local DP against the receiver).

An upload (a model update, class statistics, reliability vectors, embeddings, gradients) is
flattened, clipped to L2 norm ``clip`` and perturbed with N(0, (σ·Δ)²) before it leaves the
client, where Δ is the stated sensitivity: 2·clip when the neighbouring relation is "replace"
(any two datasets of the client: their clipped uploads differ by at most 2·clip) and clip for
"add-remove" (the client's upload is present or absent). Every upload is one
Gaussian(σ·Δ, Δ) event; the ledger holds the largest number of uploads any client made, with no
amplification (the receiver sees each upload, so none is hidden by sampling or aggregation).
Under "add-remove" the receiver still sees whether a client uploaded, so against the server
that relation gives no guarantee; it holds for parties who see only what the server sends on."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from accountants import ADVERSARIES, Gaussian, NoGuarantee, Scope
from defenses.base import DEFENSES, PrivacyUnit
from defenses.dp_fedavg import clip_to_norm


class GaussianUploadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    clip: float = Field(1.0, gt=0.0, description="L2 bound on one upload")
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / sensitivity")
    neighbouring: Literal["replace", "add-remove"] = Field(
        "replace", description="replace: sensitivity 2·clip; add-remove: clip"
    )

    @property
    def sensitivity(self) -> float:
        return 2.0 * self.clip if self.neighbouring == "replace" else self.clip


def privatize(
    upload: torch.Tensor, cfg: GaussianUploadConfig, generator: torch.Generator
) -> torch.Tensor:
    """Clipped and noised copy of ``upload`` (float64, same shape)."""
    flat = clip_to_norm(upload.detach().double().reshape(-1), cfg.clip)
    std = cfg.noise_multiplier * cfg.sensitivity
    noise = std * torch.randn(flat.shape, generator=generator, dtype=torch.float64)
    return (flat + noise).reshape(upload.shape)


def ledger_events(cfg: GaussianUploadConfig, uploads: int) -> tuple[Gaussian | NoGuarantee, ...]:
    std = cfg.noise_multiplier * cfg.sensitivity
    if cfg.neighbouring == "replace":
        scope = Scope("client", "replace one client's data", ADVERSARIES, "no amplification")
        return (Gaussian(std, cfg.sensitivity, uploads, scope=scope),)
    hidden = Scope("client", "add or remove one client", ("clients", "querier"))
    seen = Scope("client", "add or remove one client", ("server",))
    why = "add-remove neighbours: the server sees whether the client uploaded"
    return Gaussian(std, cfg.sensitivity, uploads, scope=hidden), NoGuarantee(why, seen)


class GaussianUpload:
    name = "gaussian-upload"
    stage = "upload"
    Config = GaussianUploadConfig

    def privacy_unit(self, config: GaussianUploadConfig) -> PrivacyUnit | None:
        return "client"


DEFENSES.register("gaussian-upload")(GaussianUpload())
