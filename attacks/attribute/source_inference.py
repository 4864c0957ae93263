"""Source inference (Hu et al., "Source Inference Attacks in Federated Learning", ICDM 2021):
the honest-but-curious server names the client that holds a training record.

The server holds every client's uploaded model. Hu et al. show that, for a record z known to
be in some client's training data, the Bayes-optimal posterior over its source is
P(k | z) ∝ exp(−ℓ(θ_k, z)) under a uniform prior, where θ_k is client k's local model and ℓ
its loss: a client's model fits its own records best. The guess is the argmax. Hu et al.
read the last round's local models; reading every round's upload the transcript kept
(``rounds: all``) averages each client's loss over its uploads, which evens out the round to
round drift of one upload (the posterior then has the mean loss as its exponent).

Node level: each rebuilt model answers on the population graph the server knows, the node
alone or with its ``hops``-hop neighbourhood; graph level: on the candidate graphs."""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import softmax

from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import (
    query,
    rebuilt_api,
    true_label_logit_margin,
    uploaded_weights,
)
from fgl_workbench.errors import NotApplicableError


class SourceInferenceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["server", "querier"] = Field(
        "server",
        description="server: every client's uploaded model, rebuilt from the transcript; "
        "querier: refused with the reason (one released model, or an owner-routed deployment, "
        "gives no client's answer to compare with another's)",
    )
    hops: int = Field(0, ge=0, le=5, description="node queries: 0 = node alone, k = k-hop subgraph")
    rounds: Literal["last", "all"] = Field(
        "last",
        description="last: each client's last upload (Hu et al.); all: every upload the "
        "transcript kept (keep_payloads: all), each client's loss averaged over them",
    )


def cross_entropy(logits: torch.Tensor, labels: np.ndarray) -> np.ndarray:
    """−log p_y per record, from the logit margin m = log p_y − log(1 − p_y): log(1 + e^−m),
    exact where a confident model's p_y rounds to 1."""
    return np.logaddexp(0.0, -true_label_logit_margin(logits, labels))


def posterior(losses: np.ndarray) -> np.ndarray:
    """[records, clients] P(k | z) ∝ exp(−loss); a client with no loss (no upload kept) gets 0."""
    return softmax(-losses.T, axis=1)


class SourceInferenceAttack:
    name = "source-inference"
    family = "record-source"
    threat = ThreatModel(
        sees="every client's uploaded models (the last upload, or every kept round's)",
        knows="the architecture, the population graph's features and edges (node level), "
        "the records asked about and their labels",
    )
    Config = SourceInferenceConfig

    def run(self, inp: AttackInput, config: SourceInferenceConfig, seed: int) -> AttackOutput:
        view = inp.view
        if not isinstance(view, ServerView):
            raise NotApplicableError(f"{self.name}: needs the server's view of the uploads")
        states: dict[int, list[dict]] = defaultdict(list)
        for m in uploaded_weights(view, self.name):
            states[int(m.sender.rsplit(":", 1)[-1])].append(m.payload)
        if config.rounds == "last":
            states = {k: s[-1:] for k, s in states.items()}  # messages are in round order
        records = inp.candidates
        losses = np.full((view.num_clients, records.ids.size), np.inf)
        for k, kept in sorted(states.items()):
            per_upload = [
                cross_entropy(
                    query(
                        rebuilt_api(view.spec, s, inp.knowledge, self.name), records, config.hops
                    ),
                    records.labels,
                )
                for s in kept
            ]
            losses[k] = np.mean(per_upload, axis=0)
        counts = {"clients_observed": len(states), "uploads": sum(len(s) for s in states.values())}
        return AttackOutput(posterior(losses), details={"counts": counts})


ATTACKS.register("source-inference")(SourceInferenceAttack())
