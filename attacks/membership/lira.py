"""LiRA, the likelihood-ratio attack (Carlini et al. 2022).

For each candidate, the scaled confidence φ = log p_y − log(1 − p_y) of reference models that
trained on it (IN) and that did not (OUT) is fitted with a Gaussian; the target's φ is then
scored by the likelihood ratio of the two fits (online), or by how far it lies above the OUT
fit alone (offline, which needs no model trained on the candidate). With few reference models
Carlini et al. recommend one variance shared by all records (``variance: global``)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from fgl_workbench.attacks.adaptive import adaptive_input
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import (
    observed_apis,
    per_model_output,
    query,
    true_label_logit_margin,
)
from fgl_workbench.attacks.membership.reference import ReferenceConfig, reference_outputs

MIN_STD = 1e-3  # floor for fitted standard deviations (a record every model fits perfectly)


class LiRAConfig(ReferenceConfig):
    mode: Literal["online", "offline"] = "online"
    variance: Literal["global", "per-example"] = "global"


def gaussian_fit(
    phi: np.ndarray, mask: np.ndarray, variance: str, fallback_std: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-record mean and standard deviation of ``phi`` [models, records] over ``mask``.

    Variances are unbiased: each record's mean costs one degree of freedom, also when pooled
    (``global``). A record (or, pooled, every record) seen by a single model has no spread to
    measure; ``fallback_std`` stands in then (the OUT fit's, as Carlini et al.'s fixed
    variance does)."""
    count = mask.sum(0)
    mean = np.where(mask, phi, 0.0).sum(0) / np.maximum(count, 1)
    dev2 = np.where(mask, (phi - mean) ** 2, 0.0)
    dof = np.maximum(count - 1, 0)
    if variance == "global":
        total = dof.sum()
        std = np.full(mean.shape, np.sqrt(dev2.sum() / total) if total else np.nan)
    else:
        std = np.where(dof > 0, np.sqrt(dev2.sum(0) / np.maximum(dof, 1)), np.nan)
    if fallback_std is not None:
        std = np.where(np.isnan(std), fallback_std, std)
    return mean, np.maximum(np.nan_to_num(std, nan=1.0), MIN_STD)


def log_normal_pdf(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mean) / std) ** 2 - np.log(std)


class LiRAAttack:
    name = "mia-lira"
    family = "membership"
    threat = ThreatModel(
        sees="the released model's answers (querier) or every client's uploaded model (server)",
        knows="the auxiliary pool, the training recipe (reference models), the population graph",
    )
    Config = LiRAConfig

    def run(self, inp: AttackInput, config: LiRAConfig, seed: int) -> AttackOutput:
        inp = adaptive_input(inp, config.features, self.name, seed)
        apis = observed_apis(inp, self.name)
        ref = reference_outputs(inp, config)
        cands = inp.candidates
        phi = np.stack(
            [true_label_logit_margin(z[ref.num_aux :], cands.labels) for z in ref.logits]
        )
        is_in = ref.inclusion[:, ref.num_aux :]
        mu_out, sd_out = gaussian_fit(phi, ~is_in, config.variance)
        if config.mode == "online":
            mu_in, sd_in = gaussian_fit(phi, is_in, config.variance, sd_out)

        def score(api) -> np.ndarray:
            t = true_label_logit_margin(query(api, cands, config.hops), cands.labels)
            if config.mode == "offline":
                return (t - mu_out) / sd_out
            return log_normal_pdf(t, mu_in, sd_in) - log_normal_pdf(t, mu_out, sd_out)

        return per_model_output({name: score(api) for name, api in apis.items()})


ATTACKS.register("mia-lira")(LiRAAttack())
