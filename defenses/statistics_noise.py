"""The Gaussian mechanism on class statistics (node-level DP for O-pFGL's upload).

Each node's propagated row H_v is clipped to L2 norm ``clip`` (C), then N(0, (σ·Δ)²) noise is
added to every class's sums S0 = n, S1 = Σ H_v and S2 = Σ H_v², present classes or not (which
classes a client holds is private too). Adding or removing one node moves (S0, S1, S2) by
(1, h, h²) with ‖h‖ ≤ C and ‖h²‖ ≤ ‖h‖² ≤ C², so Δ = √(1 + C² + C⁴). The statistics go out
once: one Gaussian(σ·Δ, Δ) event. Everything derived from the noisy sums (means, standard
deviations, the minimum-count threshold, applied after the noise) is post-processing.

That Δ is NOT a node-level sensitivity of what O-pFGL uploads, so the ledger records no finite
ε: rows are propagated features (removing one node moves its neighbours' rows too; issue 25's
review measured up to 5.9× the Δ above on Cora), the reliable-node expansion relabels rows
through label propagation over the whole graph (no bound on how many rows one node moves), and
the exact per-class counts of the labelled nodes are uploaded to size the surrogate graph. The
noise is kept as an empirical defense (its effect on the attacks is measured) with ε = ∞
against every party."""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.accountants import ADVERSARIES, NoGuarantee, Scope
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit


class StatisticsNoiseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    clip: float = Field(1.0, gt=0.0, description="L2 bound on one node's propagated features")
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / sensitivity")

    @property
    def sensitivity(self) -> float:
        return math.sqrt(1.0 + self.clip**2 + self.clip**4)


def clipped_rows(h: np.ndarray, cfg: StatisticsNoiseConfig) -> np.ndarray:
    """Every row scaled down to L2 norm at most ``clip``."""
    norms = np.linalg.norm(h, axis=1, keepdims=True)
    return h * np.minimum(1.0, cfg.clip / np.maximum(norms, 1e-12))


def noise(shape: tuple[int, ...], cfg: StatisticsNoiseConfig, rng: np.random.Generator):
    """N(0, (σ·Δ)²) draws of ``shape``."""
    return rng.normal(0.0, cfg.noise_multiplier * cfg.sensitivity, shape)


NO_NODE_BOUND = (
    "statistics-noise: one node moves propagated rows of its neighbours, relabels expanded "
    "rows and changes the exact class counts, beyond the noise's row sensitivity"
)


def ledger_event(cfg: StatisticsNoiseConfig) -> NoGuarantee:
    return NoGuarantee(NO_NODE_BOUND, Scope("node", "add or remove one node", ADVERSARIES))


class StatisticsNoise:
    name = "statistics-noise"
    stage = "upload"
    Config = StatisticsNoiseConfig
    no_target_epsilon = (
        "its ledger claims no finite ε (ε = ∞ against every party: no node-level sensitivity "
        "bounds what O-pFGL uploads), so no noise multiplier reaches any target; give "
        "noise_multiplier"
    )

    def privacy_unit(self, config: StatisticsNoiseConfig) -> PrivacyUnit | None:
        return "node"


DEFENSES.register("statistics-noise")(StatisticsNoise())
