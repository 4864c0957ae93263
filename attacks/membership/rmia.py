"""RMIA, the robust membership inference attack (Zarifzadeh et al. 2024).

A candidate x is compared with population records z by the pairwise likelihood ratio
LR(x, z) = [p(x|θ) / p(x)] / [p(z|θ) / p(z)], where p(·|θ) is the target's probability of the
true label and p(·) its average over reference models; the score is the fraction of z that x
dominates, Pr_z[LR(x, z) > γ]. Offline (no reference model trained on x), p(x) is
approximated from the OUT models as ½((1 + a)·p_OUT(x) + (1 − a)).

Because every x is compared with the same population sample, that fraction is a monotone
step function of p(x|θ)/p(x): the ROC is that of the ratio, coarsened to steps of 1/|Z|. The
attack therefore returns the ratio as its score (full resolution at low FPR) and the paper's
fraction in ``details``."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from fgl_workbench.attacks.adaptive import adaptive_input
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import (
    observed_apis,
    per_model_output,
    query,
    true_label_prob,
)
from fgl_workbench.attacks.membership.reference import ReferenceConfig, reference_outputs
from fgl_workbench.errors import NotApplicableError


class RMIAConfig(ReferenceConfig):
    mode: Literal["online", "offline"] = "offline"
    a: float = Field(0.3, ge=0.0, le=1.0, description="offline approximation of p(x)")
    gamma: float = Field(1.0, gt=0.0)


def reference_prob(prob: np.ndarray, is_in: np.ndarray, mode: str, a: float) -> np.ndarray:
    """p(x) per record from reference probabilities [models, records]."""
    if mode == "online":
        return prob.mean(0)
    out = ~is_in
    p_out = np.where(out, prob, 0.0).sum(0) / np.maximum(out.sum(0), 1)
    return 0.5 * ((1 + a) * p_out + (1 - a))


class RMIAAttack:
    name = "mia-rmia"
    family = "membership"
    threat = ThreatModel(
        sees="the released model's answers (querier) or every client's uploaded model (server)",
        knows="the auxiliary pool, the training recipe (reference models), the population graph",
    )
    Config = RMIAConfig

    def run(self, inp: AttackInput, config: RMIAConfig, seed: int) -> AttackOutput:
        inp = adaptive_input(inp, config.features, self.name, seed)
        apis = observed_apis(inp, self.name)
        n_aux = inp.knowledge.aux_ids.size
        if n_aux == 0:
            raise NotApplicableError(f"{self.name}: needs population records (aux_fraction > 0)")
        ref = reference_outputs(inp, config)
        records = ref.records  # aux pool (the population z), then candidates (x)
        prob = np.stack([true_label_prob(z, records.labels) for z in ref.logits])
        p_ref = reference_prob(prob, ref.inclusion, config.mode, config.a)
        tiny = 1e-30
        per_model, fractions = {}, {}
        for name, api in apis.items():
            ratio = true_label_prob(query(api, records, config.hops), records.labels) / (
                p_ref + tiny
            )
            ratio_z, ratio_x = np.sort(ratio[:n_aux]), ratio[n_aux:]
            per_model[name] = np.log(ratio_x + tiny)
            fractions[name] = np.searchsorted(ratio_z, ratio_x / config.gamma) / n_aux
        out = per_model_output(per_model)
        out.details["population_fraction"] = np.max(list(fractions.values()), axis=0)
        return out


ATTACKS.register("mia-rmia")(RMIAAttack())
