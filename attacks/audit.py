"""The re-identification audit of a metric-DP release (CE-FedGNN, Theorem 3.6): told that a
set of noisy releases came from one of two nodes whose clean normalised embeddings lie within
ρ, say which. The adversary is the strongest the guarantee speaks of: it knows both candidates'
clean embeddings (it holds the released model and the population graph) and the mechanism, so
it uses the Neyman–Pearson test, the log-likelihood ratio of N(e_v, σ² I) against
N(e_u, σ² I) summed over the releases. How well it does bounds ε from below; the bound must
stay under the accountant's ε(ρ)."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from attacks.base import ATTACKS, AttackInput, AttackOutput, NodePairs, ThreatModel
from defenses.metric_dp import normalise
from workbench.errors import NotApplicableError
from workbench.threat import ReleaseView


class ReidentificationAuditConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trials: int = Field(2000, ge=40, le=1_000_000, description="pairs the challenger draws")


def likelihood_ratio(
    releases: np.ndarray, sigmas: np.ndarray, first: np.ndarray, second: np.ndarray
) -> np.ndarray:
    """log N(y; e2, σ²) − log N(y; e1, σ²) summed over each trial's releases:
    Σ_j ⟨y_j − (e1 + e2)/2, e2 − e1⟩ / σ_j²."""
    mid, diff = (first + second) / 2, second - first
    centred = releases - mid[:, None, :]
    return (np.einsum("trd,td->tr", centred, diff) / sigmas[None, :] ** 2).sum(1)


class ReidentificationAudit:
    name = "reidentification-audit"
    family = "audit"
    threat = ThreatModel(
        sees="noisy metric-DP releases of one node of each candidate pair, the released model",
        knows="the population graph, the mechanism (σ0 and release count, from the ledger)",
    )
    Config = ReidentificationAuditConfig

    def run(self, inp: AttackInput, config: ReidentificationAuditConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, ReleaseView) or knowledge.graph is None:
            raise NotApplicableError(
                "reidentification-audit: needs a metric-DP release and the population graph"
            )
        pairs = inp.candidates
        assert isinstance(pairs, NodePairs)
        with torch.no_grad():
            view.model.eval()
            g = knowledge.graph
            clean = normalise(view.model.embed(g.x, g.edge_index).double()).numpy()
        scores = likelihood_ratio(view.releases, view.sigmas, clean[pairs.src], clean[pairs.dst])
        return AttackOutput(scores)


ATTACKS.register("reidentification-audit")(ReidentificationAudit())
