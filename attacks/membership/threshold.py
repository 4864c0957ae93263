"""Threshold membership inference (Yeom et al. 2018; Song & Mittal 2021 signals).

The score is a per-record signal of the released model's output: members tend to have lower
loss, higher confidence and lower entropy. The decision threshold is calibrated on the
auxiliary pool (known non-members): the (1 − fpr) quantile of their scores, so the attack's
false-positive rate on the population is about ``fpr`` without ever seeing a member."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from attacks.base import ATTACKS, AttackInput, AttackOutput
from workbench.errors import NotApplicableError
from workbench.query import NodeQueryAPI
from workbench.threat import QuerierView


class ThresholdConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    signal: Literal["loss", "confidence", "entropy", "modified_entropy"] = "loss"
    hops: int = Field(0, ge=0, le=5, description="node queries: 0 = node alone, k = k-hop subgraph")
    calibration_fpr: float = Field(0.05, gt=0.0, lt=1.0)


def signal_scores(logits: torch.Tensor, labels: np.ndarray, signal: str) -> np.ndarray:
    """Membership scores, oriented so that higher means 'more likely a member'."""
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    logp = F.log_softmax(logits.double(), dim=1)
    p = logp.exp()
    if signal == "loss":
        s = logp.gather(1, y[:, None]).squeeze(1)
    elif signal == "confidence":
        s = p.max(1).values
    elif signal == "entropy":
        s = (p * logp).sum(1)
    else:  # modified entropy (Song & Mittal 2021), uses the true label
        py = p.gather(1, y[:, None]).squeeze(1)
        eps = 1e-30
        other = p.clone().scatter_(1, y[:, None], 0.0)
        mentr = -(1 - py) * torch.log(py + eps) - (other * torch.log(1 - other + eps)).sum(1)
        s = -mentr
    return s.numpy()


class ThresholdAttack:
    name = "mia-threshold"
    family = "membership"
    view = "querier"
    Config = ThresholdConfig

    def run(self, inp: AttackInput, config: ThresholdConfig, seed: int) -> AttackOutput:
        view = inp.view
        if not isinstance(view, QuerierView):
            raise NotApplicableError(f"{self.name} needs the external querier's view")
        scores = self._scores(
            view, inp.candidates.ids, inp.candidates.graphs, inp.candidates.labels, config
        )
        know = inp.knowledge
        threshold = None
        if know.aux_ids.size:
            aux = self._scores(view, know.aux_ids, know.aux_graphs, know.aux_labels, config)
            threshold = float(np.quantile(aux, 1.0 - config.calibration_fpr))
        return AttackOutput(scores=scores, threshold=threshold)

    @staticmethod
    def _scores(view: QuerierView, ids, graphs, labels, config: ThresholdConfig) -> np.ndarray:
        api = view.api
        logits = (
            api.logits(ids, config.hops)
            if isinstance(api, NodeQueryAPI)
            else api.logits(list(graphs))
        )
        return signal_scores(logits, labels, config.signal)


ATTACKS.register("mia-threshold")(ThresholdAttack())
