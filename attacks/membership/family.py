"""The membership family: which records trained the target. Its challenge is the cell's
balanced set of members and non-members (a curious client is asked only about the other
clients' records); the scorer holds who is a member and each record's owner, and beside
every attack's metrics reports the challenge's chance line (``chance_line``), computed once
per challenge."""

from __future__ import annotations

from typing import Any

import numpy as np

from fgl_workbench.adversary.threat import curious_client
from fgl_workbench.attacks.base import Attack, AttackOutput
from fgl_workbench.attacks.challenges import (
    Challenge,
    design_strata,
    membership_challenge,
    others_records,
    public_facts,
)
from fgl_workbench.attacks.family import (
    CellInputs,
    FamilyInputs,
    Records,
    adversary_view,
    configured_adversaries,
)
from fgl_workbench.attacks.metrics import ROC, chance_line, membership_metrics


class Membership:
    name = "membership"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return configured_adversaries(config)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        challenge = cell.shared(
            "membership", lambda: membership_challenge(cell.federation, cell.seeds("challenge"))
        )
        left_out = None  # the curious client, whose own records it is not asked about
        if getattr(config, "adversary", None) == "client":
            left_out = curious_client(cell.federation, config.client)
            challenge = others_records(challenge, left_out)

        def chance() -> dict[str, float | None]:
            facts, strata = public_facts(cell.federation, challenge), design_strata(challenge)
            return chance_line(facts, challenge.is_member, strata, cell.seeds("chance"))

        def score(out: AttackOutput) -> tuple[dict[str, Any], ROC]:
            metrics, curve = membership_metrics(
                out.scores, challenge.is_member, out.threshold, delta=cell.delta
            )
            metrics.update(per_client_metrics(out, challenge))
            metrics.update(cell.shared(("membership-chance", left_out), chance))
            return metrics, curve

        def records(out: AttackOutput) -> Records:
            threshold = float("nan") if out.threshold is None else float(out.threshold)
            return challenge.candidates.ids, out.scores, challenge.is_member, threshold

        view = adversary_view(config, cell, cell.knowledge)
        return FamilyInputs(view, cell.knowledge, challenge.candidates, score, cell.pool, records)


def per_client_metrics(out: AttackOutput, challenge: Challenge) -> dict[str, float | None]:
    """When the adversary scored each client's own model (the server), AUC of client k's
    model on client k's candidates, summarised over clients."""
    per_model = out.details.get("per_model")
    if not per_model:
        return {}
    aucs = []
    for name, scores in per_model.items():
        k = int(name.rsplit(":", 1)[-1])
        mine = challenge.owner == k
        truth = challenge.is_member[mine]
        if truth.any() and not truth.all():
            aucs.append(membership_metrics(scores[mine], truth)[0]["auc"])
    if not aucs:
        return {}
    return {
        "client_auc_mean": float(np.mean(aucs)),
        "client_auc_min": float(np.min(aucs)),
        "client_auc_max": float(np.max(aucs)),
    }
