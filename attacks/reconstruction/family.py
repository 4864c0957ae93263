"""The reconstruction families: edges between nodes (``link``), the features of sampled
client nodes from released embeddings (``feature``), and a client's training data from what
it uploaded (``client-data``). The edges, features and labels asked about stay in the
scorers; the knowledge each adversary gets leaves them out."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from fgl_workbench.adversary.pseudonyms import pseudonymous
from fgl_workbench.adversary.threat import (
    BackgroundKnowledge,
    InsiderView,
    QuerierView,
    ServedView,
    background_knowledge,
    client_data_knowledge,
    feature_knowledge,
    insider_view,
    querier_view,
    served_view,
    server_view,
)
from fgl_workbench.attacks.base import Attack, AttackInput, AttackOutput
from fgl_workbench.attacks.challenges import (
    LinkChallenge,
    client_data_challenge,
    feature_challenge,
    link_challenge,
)
from fgl_workbench.attacks.family import CellInputs, FamilyInputs, exchanged_nodes, hops_of
from fgl_workbench.attacks.metrics import (
    label_reconstruction_metrics,
    link_metrics,
    neighbour_mse,
    reconstruction_metrics,
    singleton_metrics,
    value_fractions,
)
from fgl_workbench.attacks.reconstruction.structure import structure_inputs
from fgl_workbench.data.federation import Federation
from fgl_workbench.targets.base import TrainedTarget


def link_knowledge(
    federation: Federation, trained: TrainedTarget, challenge: LinkChallenge
) -> BackgroundKnowledge:
    """A link adversary's knowledge: the auxiliary pool, the population's node features, and
    of its edges only the known share of the challenge (``graph.edge_index``, both directions)
    with as many known non-edges. The edges it is asked about are nowhere in it. Population
    ids: ``link_attack_input`` hands it over under the challenge's pseudonyms."""
    return partial_graph(background_knowledge(federation, trained), challenge)


def link_attack_input(
    view: ServedView | QuerierView | InsiderView,
    knowledge: BackgroundKnowledge,
    challenge: LinkChallenge,
) -> AttackInput:
    """What a link attack is handed: the view and knowledge (both built on population ids)
    and the pairs, all under the challenge's pseudonyms."""
    view, knowledge = pseudonymous(view, knowledge, challenge.names)
    return AttackInput(view, knowledge, challenge.candidates)


def partial_graph(base: BackgroundKnowledge, challenge: LinkChallenge) -> BackgroundKnowledge:
    """``base`` with its edges cut to the challenge's known share (and its known non-edges)."""
    assert base.graph is not None
    known = torch.as_tensor(challenge.known_edges)
    graph = Data(
        x=base.graph.x,
        edge_index=torch.cat([known, known.flip(0)], 1),
        num_nodes=base.graph.num_nodes,
    )
    return replace(base, graph=graph, known_non_edges=challenge.known_non_edges)


class Link:
    """Is there an edge between two nodes? Asked about node pairs of the population graph
    (among the exchanged nodes when the adversary reads exchanged embeddings); the adversary
    knows a share of the challenge's edges and as many non-edges. An attack that changes a
    node's features declares the change as its config's ``step``: the deployments' answers
    to those probes, for the candidate pairs' first nodes, are part of its view. An attack
    run as the server (its config's ``adversary``) recovers one client's structure from its
    uploads instead (``structure``)."""

    name = "link"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return ("server",) if "adversary" in config.model_fields else ("served",)  # type: ignore[attr-defined]

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        if getattr(config, "adversary", None) == "server":
            return structure_inputs(config, cell)
        trained, federation = cell.trained, cell.federation
        source = getattr(config, "source", "served")
        among = None
        if source == "exchanged":
            exchanged = insider_view(trained, federation, source)
            among = exchanged_nodes(exchanged)
        links: LinkChallenge = cell.shared(
            ("links", source == "exchanged"),
            lambda: link_challenge(federation, cell.seeds("link-challenge"), among=among),
        )
        knowledge = link_knowledge(federation, trained, links)
        view: ServedView | QuerierView | InsiderView
        if source == "exchanged":
            view = exchanged
        elif source == "release":
            view = querier_view(trained, federation, knowledge, (hops_of(config),))
        else:
            step = getattr(config, "step", None)
            view = served_view(trained, federation, links.pairs.src, step)
        inp = link_attack_input(view, knowledge, links)
        return FamilyInputs(
            inp.view,
            inp.knowledge,
            inp.candidates,
            lambda out: link_metrics(out.scores, links.is_edge, links.kind),
        )


class Feature:
    """An insider inverting released embeddings of sampled client nodes; the scorer holds
    their features and the population's (for the nearest-neighbour yardstick)."""

    name = "feature"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return ("insider",)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        trained, federation = cell.trained, cell.federation
        among, view = None, None
        if config.source == "exchanged":
            view = insider_view(trained, federation, "exchanged", config.combine)
            among = exchanged_nodes(view)
        task = feature_challenge(federation, cell.seeds("feature-challenge"), among=among)
        knowledge = feature_knowledge(
            federation,
            trained,
            task.nodes,
            config.known_edges,
            cell.seeds("feature-knowledge"),
        )
        if view is None:
            view = insider_view(
                trained, federation, config.source, config.combine, knowledge.graph, (config.hops,)
            )
        assert knowledge.graph is not None
        prior = knowledge.aux_features().numpy(force=True).mean(0)

        def score(out: AttackOutput) -> tuple[dict[str, Any], None]:
            metrics, _ = reconstruction_metrics(out.scores, task.features, prior)
            metrics["mse_nearest_1pct"] = neighbour_mse(task.features, task.population)
            return metrics, None

        return FamilyInputs(view, knowledge, task.nodes, score)


class ClientData:
    """The server reconstructing client ``config.client``'s training data from what it
    uploaded: it knows that client's shape (and its structure if ``config.structure`` says
    so), not its data; the scorer holds the client's training features and labels."""

    name = "client-data"

    def adversaries(self, config: type) -> tuple[str, ...]:
        return ("server",)

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs:
        federation = cell.federation
        task = client_data_challenge(federation, config.client)
        structure = getattr(config, "structure", "none") == "known"
        knowledge = client_data_knowledge(federation, cell.trained, config.client, structure)
        assert knowledge.graph is not None
        prior_x = knowledge.aux_features().numpy(force=True).mean(0)
        prior_y = value_fractions(knowledge.aux_labels, federation.dataset.num_classes)

        def score(out: AttackOutput) -> tuple[dict[str, Any], None]:
            return client_data_metrics(out, task.features, task.labels, prior_x, prior_y), None

        view = server_view(cell.trained, federation)
        return FamilyInputs(view, knowledge, np.array([config.client]), score)


def client_data_metrics(
    out: AttackOutput,
    features: np.ndarray,
    labels: np.ndarray,
    prior_x: np.ndarray,
    prior_y: np.ndarray,
) -> dict[str, Any]:
    """A reconstruction of a client's training rows scored against their ``features`` and
    ``labels`` (an unordered one matched first), beside the priors: the auxiliary pool's mean
    row and label fractions."""
    ordered = out.details.get("order") != "set"
    metrics, match = reconstruction_metrics(out.scores, features, prior_x, ordered)
    if "class_size" in out.details:
        sizes = np.asarray(out.details["class_size"])
        metrics.update(singleton_metrics(out.scores, features, match, sizes))
    guessed = np.asarray(out.details["labels"])[match]
    metrics.update(label_reconstruction_metrics(guessed, labels, prior_y))
    return metrics
