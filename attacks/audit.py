"""The re-identification audit of a metric-DP release (CE-FedGNN, Theorem 3.6): told that a
set of noisy releases came from one of two nodes whose clean normalised embeddings lie within
ρ, say which. The adversary is the strongest the guarantee speaks of: it knows both candidates'
clean vectors at each release and the mechanism, so
it uses the Neyman–Pearson test, the log-likelihood ratio of N(e_v, σ² I) against
N(e_u, σ² I) summed over the releases. The releases are the ones the target really made (the
challenger only picks which node's to show), so a mechanism with less noise than its ledger
says fails the audit. How well it does bounds ε from below; the bound must stay under the
accountant's ε(ρ)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.adversary.threat import ReleaseView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.errors import NotApplicableError


class ReidentificationAuditConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    trials: int = Field(2000, ge=40, le=1_000_000, description="pairs the challenger draws")


def likelihood_ratio(
    releases: np.ndarray, sigma0: float, first: np.ndarray, second: np.ndarray
) -> np.ndarray:
    """log N(y; e2, σ²) − log N(y; e1, σ²) summed over each trial's releases (NaN rows are
    releases that node did not have): Σ_r ⟨y_r − (e1_r + e2_r)/2, e2_r − e1_r⟩ / σ²."""
    mid, diff = (first + second) / 2, second - first
    return np.nansum(((releases - mid) * diff).sum(-1), axis=1) / sigma0**2


class ReidentificationAudit:
    name = "reidentification-audit"
    family = "audit"
    threat = ThreatModel(
        sees="the target's real noisy metric-DP releases of one node of each candidate pair",
        knows="both candidates' clean vectors at each release and σ0 (from the ledger)",
    )
    Config = ReidentificationAuditConfig

    def run(self, inp: AttackInput, config: ReidentificationAuditConfig, seed: int) -> AttackOutput:
        view = inp.view
        if not isinstance(view, ReleaseView):
            raise NotApplicableError("reidentification-audit: needs a metric-DP release")
        return AttackOutput(likelihood_ratio(view.releases, view.sigma0, view.first, view.second))


ATTACKS.register("reidentification-audit")(ReidentificationAudit())
