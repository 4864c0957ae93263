"""The attribute families: a hidden node attribute or label (``attribute``), each client's
label distribution (``distribution``), the member dataset behind each generator a client
received (``source``), and the client holding each training record (``record-source``).
Each challenge is asked here; the truth stays in the scorers."""

from __future__ import annotations

from typing import Any

import numpy as np

from fgl_workbench.adversary.threat import attribute_knowledge, server_view
from fgl_workbench.attacks.attribute.inference import known_values
from fgl_workbench.attacks.base import Attack, AttackOutput
from fgl_workbench.attacks.challenges import (
    attribute_challenge,
    label_distribution_challenge,
    membership_challenge,
    source_challenge,
)
from fgl_workbench.attacks.family import (
    CellInputs,
    FamilyInputs,
    adversary_view,
    configured_adversaries,
    exchanged_nodes,
)
from fgl_workbench.attacks.metrics import (
    attribute_metrics,
    distribution_metrics,
    source_metrics,
    value_fractions,
)
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.query import GraphOwnerRoutedQueryAPI, OwnerRoutedQueryAPI
from fgl_workbench.targets.base import TrainedTarget


class Attribute:
    """A hidden feature column (known on the auxiliary pool only) or the label of sampled
    client nodes; scored against the prior of the values the adversary knows."""

    name = "attribute"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return configured_adversaries(config)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        # the view keeps no features of the knowledge it is given (only the known edges,
        # which hiding a column does not change), so it can be cut before the challenge
        view = adversary_view(config, cell, cell.knowledge)
        task = attribute_challenge(
            cell.federation,
            config.attribute,
            cell.seeds("attribute-challenge"),
            among=exchanged_nodes(view),
        )
        knowledge = attribute_knowledge(cell.federation, cell.trained, task.hidden)
        prior = value_fractions(known_values(knowledge, config.attribute), task.num_values)
        return FamilyInputs(
            view,
            knowledge,
            task.nodes,
            lambda out: (attribute_metrics(out.scores, task.truth, prior), None),
        )


class Distribution:
    """The server inferring each client's label distribution from its uploads."""

    name = "distribution"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return ("server",)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        truth = label_distribution_challenge(cell.federation)
        prior = value_fractions(cell.knowledge.aux_labels, truth.truth.shape[1])
        return FamilyInputs(
            server_view(cell.trained, cell.federation),
            cell.knowledge,
            truth.clients,
            lambda out: (distribution_metrics(out.scores, truth.truth, prior), None),
        )


class Source:
    """A curious client naming the source dataset of each generator it received; the
    senders (the server's shuffle) stay with the scorer. Its prior: the auxiliary pool's
    source fractions."""

    name = "source"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return configured_adversaries(config)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        senders = cell.trained.senders.get(config.client)
        if senders is None:
            raise NotApplicableError(f"the target shares no generators with client {config.client}")
        task = source_challenge(cell.federation, senders)
        aux = np.array([int(getattr(g, "source", 0)) for g in cell.knowledge.aux_graphs])
        prior = value_fractions(aux, task.num_sources)

        def score(out: AttackOutput) -> tuple[dict[str, Any], None]:
            metrics = attribute_metrics(out.scores, task.truth, prior)
            metrics["generators"] = metrics.pop("nodes")
            return metrics, None

        view = adversary_view(config, cell, cell.knowledge)
        return FamilyInputs(view, cell.knowledge, task.generators, score)


class RecordSource:
    """Hu et al.'s source inference: which client holds each training record. The records
    asked about are the membership challenge's (the clients' training records, and their
    held-out records for the scorer's layout line), so the same records are asked about in
    both families; each record's owner stays with the scorer. Only the server, which holds a
    model per client, is asked: a querier is refused with the reason (``querier_refusal``)."""

    name = "record-source"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return configured_adversaries(config)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        if config.adversary == "querier":
            raise NotApplicableError(f"{attack.name}: {querier_refusal(cell.trained)}")
        challenge = cell.shared(
            "membership", lambda: membership_challenge(cell.federation, cell.seeds("challenge"))
        )
        view = adversary_view(config, cell, cell.knowledge)

        def score(out: AttackOutput) -> tuple[dict[str, Any], None]:
            return source_metrics(out.scores, challenge.owner, challenge.is_member), None

        return FamilyInputs(view, cell.knowledge, challenge.candidates, score)


def querier_refusal(trained: TrainedTarget) -> str:
    """Why an external querier cannot infer a record's source from what ``trained`` deploys.
    Hu et al.'s rule compares every client's loss on the record."""
    if isinstance(trained.query, OwnerRoutedQueryAPI | GraphOwnerRoutedQueryAPI):
        return (
            "not applicable to the querier: the target deploys a model per client behind one "
            "owner-routed interface, which answers each record with its holder's model only "
            "and hides which model answered, so the querier never holds two clients' answers "
            "on one record to compare; a deployment that showed its routing (or served each "
            "client's records at that client's own address) would name the holder outright, "
            "a leak of the deployment rather than of the models"
        )
    return (
        "not applicable to the querier: it observes one released model, whose answer on a "
        "record is the same whichever client held it, so the answers tell the clients apart "
        "no better than the record and the public graph alone"
    )
