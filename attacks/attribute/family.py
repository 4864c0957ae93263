"""The attribute families: a hidden node attribute or label (``attribute``), each client's
label distribution (``distribution``), and the member dataset behind each generator a client
received (``source``). Each challenge is asked here; the truth stays in the scorers."""

from __future__ import annotations

from typing import Any

import numpy as np

from fgl_workbench.adversary.threat import attribute_knowledge, server_view
from fgl_workbench.attacks.attribute.inference import known_values
from fgl_workbench.attacks.base import Attack, AttackOutput
from fgl_workbench.attacks.challenges import (
    attribute_challenge,
    label_distribution_challenge,
    source_challenge,
)
from fgl_workbench.attacks.family import (
    CellInputs,
    FamilyInputs,
    adversary_view,
    configured_adversaries,
    exchanged_nodes,
)
from fgl_workbench.attacks.metrics import attribute_metrics, distribution_metrics, value_fractions
from fgl_workbench.errors import NotApplicableError


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
