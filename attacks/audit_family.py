"""The audit family: the metric-DP re-identification game on the target's real releases,
scored as a held-out ε lower bound against the accountant's ε(ρ)."""

from __future__ import annotations

import warnings
from typing import Any

from fgl_workbench.accountants import MetricGaussian, PrivacyLedger, epsilon
from fgl_workbench.accountants.accountant import OrderGridWarning
from fgl_workbench.adversary.threat import ReleaseView
from fgl_workbench.attacks.base import Attack, AttackOutput
from fgl_workbench.attacks.challenges import reidentification_challenge
from fgl_workbench.attacks.family import CellInputs, FamilyInputs
from fgl_workbench.attacks.metrics import ROC, held_out_epsilon, membership_metrics
from fgl_workbench.errors import NotApplicableError


class Audit:
    """The challenger shows, for disjoint pairs of released nodes within the reported ρ of
    each other, the noisy vectors the target really released for one of them (its evaluator
    record of the metric-DP releases); the scorer holds which, and compares the held-out ε
    lower bound with the accountant's ε(ρ) at the cell's δ."""

    name = "audit"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return ("insider",)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        trained = cell.trained
        events = [e for e in trained.ledger.metric().events if isinstance(e, MetricGaussian)]
        rho = trained.utility.get("metric_rho")
        released = trained.metric_releases
        if not events or rho is None or released is None:
            raise NotApplicableError(
                "reidentification-audit: the target makes no metric-DP release of node "
                "vectors (or its snapshot does not keep what was released)"
            )
        if len({e.sigma0 for e in events}) != 1:
            raise NotApplicableError("reidentification-audit: releases at more than one σ0")
        seed = cell.seeds("reidentification")
        task = reidentification_challenge(released, rho, config.trials, seed)
        level = cell.federation.dataset.level
        view = ReleaseView(level, task.releases, task.first, task.second, events[0].sigma0)

        def score(out: AttackOutput) -> tuple[dict[str, Any], ROC]:
            metrics, curve = membership_metrics(out.scores, task.chosen)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OrderGridWarning)
                # the game plays the vector releases alone: their mechanism's ε(ρ) (a party
                # seeing more beside them, e.g. exact degrees, has ε(ρ) = ∞ in the ledger)
                bound = epsilon(PrivacyLedger(tuple(events)), cell.delta, rho=rho).epsilon
            found = held_out_epsilon(out.scores, task.chosen, cell.delta, seed)
            metrics.update(
                {
                    "epsilon_held_out": found,
                    "epsilon_accountant": bound,
                    "bound_holds": float(found <= bound),
                    "rho": rho,
                    "pair_distance_mean": float(task.distance.mean()),
                }
            )
            return metrics, curve

        return FamilyInputs(view, cell.knowledge, task.pairs, score)
