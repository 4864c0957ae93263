"""Threshold membership inference (Yeom et al. 2018; Song & Mittal 2021 signals).

The score is a per-record signal of the observed model's output: members tend to have lower
loss, higher confidence and lower entropy. The decision threshold is calibrated on the
auxiliary pool (known non-members): the (1 − fpr) quantile of their scores, so the attack's
false-positive rate on the population is about ``fpr`` without ever seeing a member."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field

from fgl_workbench.attacks.adaptive import adaptive_input
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import (
    QueryConfig,
    observed_apis,
    per_model_output,
    query,
    true_label_logit_margin,
)


class ThresholdConfig(QueryConfig):
    signal: Literal["loss", "confidence", "entropy", "modified_entropy"] = "loss"
    calibration_fpr: float = Field(0.05, gt=0.0, lt=1.0)


def signal_scores(logits: torch.Tensor, labels: np.ndarray, signal: str) -> np.ndarray:
    """Membership scores, oriented so that higher means 'more likely a member'.

    Loss and confidence are scored by the log-odds of the label (of the top class), log p −
    log(1 − p): an increasing function of −loss (of the confidence), so every rank-based
    metric is the loss's (the confidence's), but without the ties rounding makes once a model
    is confident: past a logit margin of about 37, 1 + e^−margin is 1 in double precision and
    log p is exactly 0 for every such record, which hides the most memorised ones."""
    y = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    logp = F.log_softmax(logits.double(), dim=1)
    p = logp.exp()
    if signal == "loss":
        return true_label_logit_margin(logits, labels)
    if signal == "confidence":
        return true_label_logit_margin(logits, logits.argmax(1).numpy(force=True))
    if signal == "entropy":
        s = (p * logp).sum(1)
    else:  # modified entropy (Song & Mittal 2021), uses the true label
        py = p.gather(1, y[:, None]).squeeze(1)
        eps = 1e-30
        other = p.clone().scatter_(1, y[:, None], 0.0)
        mentr = -(1 - py) * torch.log(py + eps) - (other * torch.log(1 - other + eps)).sum(1)
        s = -mentr
    return s.numpy(force=True)


class ThresholdAttack:
    name = "mia-threshold"
    family = "membership"
    threat = ThreatModel(
        sees="the released model's answers (querier) or every client's uploaded model (server)",
        knows="the auxiliary pool (known non-members, for the threshold)",
    )
    Config = ThresholdConfig

    def run(self, inp: AttackInput, config: ThresholdConfig, seed: int) -> AttackOutput:
        inp = adaptive_input(inp, config.features, self.name, seed)
        apis = observed_apis(inp, self.name)
        cands, aux = inp.candidates, inp.knowledge.aux

        def scores(api, records):
            return signal_scores(query(api, records, config.hops), records.labels, config.signal)

        out = per_model_output({name: scores(api, cands) for name, api in apis.items()})
        if aux.ids.size:
            calib = np.max([scores(api, aux) for api in apis.values()], axis=0)
            out = AttackOutput(
                out.scores, float(np.quantile(calib, 1.0 - config.calibration_fpr)), out.details
            )
        return out


ATTACKS.register("mia-threshold")(ThresholdAttack())
