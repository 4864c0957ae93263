"""The Gaussian mechanism on any uploaded tensor (local DP against the receiver).

An upload (a model update, class statistics, reliability vectors, embeddings, gradients) is
flattened, clipped to L2 norm ``clip`` and perturbed with N(0, (σ·Δ)²) before it leaves the
client. Neighbouring datasets replace one client's data: their clipped uploads differ by at
most Δ = 2·clip. Every upload is one Gaussian(σ·Δ, Δ) event; the ledger holds the largest
number of uploads any client made, with no amplification (the receiver sees each upload, so
none is hidden by sampling or aggregation), and everyone else sees post-processing of them.

Adding or removing a client is not a neighbouring relation this mechanism protects: its noise
leaves with its upload, so without the client the receiver's sum lacks that noise too (exactly
zero where nobody else uploads). ``neighbouring: add-remove`` is refused for that reason.

``target_epsilon`` (instead of ``noise_multiplier``, ``fgl_workbench.running.calibration``): σ is
the smallest whose ledger meets the target against everyone, planned for a client uploading in every
round (the real ε is at most the target, equal when every client uploads every round).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import ConfigDict, Field, field_validator

from fgl_workbench.accountants import ADVERSARIES, Gaussian, Scope
from fgl_workbench.defenses import noise
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.defenses.calibration import NoiseOrEpsilon, target_epsilon_field
from fgl_workbench.defenses.dp_fedavg import clip_to_norm


class GaussianUploadConfig(NoiseOrEpsilon):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    clip: float = Field(1.0, gt=0.0, description="L2 bound on one upload")
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / sensitivity")
    target_epsilon: float | None = target_epsilon_field()
    neighbouring: Literal["replace"] = Field(
        "replace", description="replace one client's data: sensitivity 2·clip"
    )

    @field_validator("neighbouring", mode="before")
    @classmethod
    def _replace_only(cls, value: object) -> object:
        if value == "add-remove":
            raise ValueError(
                "add-remove gives no guarantee with local noise (a client's noise leaves only "
                "with its upload, so its presence changes the noise); use replace"
            )
        return value

    @property
    def sensitivity(self) -> float:
        return 2.0 * self.clip


def privatize(
    upload: torch.Tensor, cfg: GaussianUploadConfig, generator: torch.Generator
) -> torch.Tensor:
    """Clipped and noised copy of ``upload`` (float64, same shape)."""
    flat = clip_to_norm(upload.detach().double().reshape(-1), cfg.clip)
    std = cfg.noise_multiplier * cfg.sensitivity
    return (flat + noise.gaussian(flat.shape, std, generator)).reshape(upload.shape)


def ledger_events(cfg: GaussianUploadConfig, uploads: int) -> tuple[Gaussian]:
    std = cfg.noise_multiplier * cfg.sensitivity
    scope = Scope("client", "replace one client's data", ADVERSARIES, "no amplification")
    return (Gaussian(std, cfg.sensitivity, uploads, scope=scope),)


class GaussianUpload:
    name = "gaussian-upload"
    stage = "upload"
    Config = GaussianUploadConfig

    def privacy_unit(self, config: GaussianUploadConfig) -> PrivacyUnit | None:
        return "client"


DEFENSES.register("gaussian-upload")(GaussianUpload())
