"""Link stealing and attribute inference against a user's node-level model, asked as the
workbench asks them of its own targets (``fgl_workbench.attacks.challenges``): the user's
graph is one client holding every node, ``aux`` the adversary's labelled pool. The model
answers on the true graph, as it serves; the adversary's knowledge leaves out what it is asked
(the asked edges, the hidden feature column, the candidates' labels), whose truth stays in the
scorer here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.adversary.threat import BackgroundKnowledge, QuerierView, column_hidden
from fgl_workbench.attacks import AttackInput, AttackOutput
from fgl_workbench.attacks.attribute.inference import known_values
from fgl_workbench.attacks.challenges import attribute_challenge, link_challenge
from fgl_workbench.attacks.family import hops_of
from fgl_workbench.attacks.metrics import attribute_metrics, link_extras, value_fractions
from fgl_workbench.attacks.reconstruction.family import link_attack_input, partial_graph
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation, build_federation
from fgl_workbench.data.partition import ClientPart, Partition
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.external.inference import InferenceAudit
from fgl_workbench.external.scores import LINK, ScoreAudit, audit_scores
from fgl_workbench.query import NodeQueryAPI, observed
from fgl_workbench.seeding import derive_seed

Scorer = Callable[[AttackOutput], ScoreAudit | InferenceAudit]
SHOWN = (("accuracy", "accuracy_baseline"), ("macro_f1", "macro_f1_baseline"))


@dataclass(frozen=True)
class UserGraph:
    """What the link and attribute audits share: the user's model, the graph it serves on
    (``knowledge.graph``: features and every edge), that graph as a one-client federation
    (what the challenges are drawn from) and the querier's usual knowledge, which each audit
    cuts down to what its adversary may know."""

    model: nn.Module
    federation: Federation
    knowledge: BackgroundKnowledge
    num_classes: int


def user_graph(
    model: nn.Module,
    data: Data,
    knowledge: BackgroundKnowledge,
    members: np.ndarray,
    nonmembers: np.ndarray,
    num_classes: int,
) -> UserGraph:
    """Every node is the one client's: all of the graph's edges are the user's private data,
    the pool's included (the adversary knows the pool's labels, not its edges); the auxiliary
    pool is the partition's, as in a workbench federation."""
    assert knowledge.graph is not None
    n = int(knowledge.graph.num_nodes)
    dataset = NodeDataset("data", Data(x=data.x, edge_index=data.edge_index, y=data.y), num_classes)
    client = ClientPart(0, np.arange(n), members, np.zeros(0, np.int64), nonmembers)
    partition = Partition("node", "external", (client,), knowledge.aux_ids)
    return UserGraph(model, build_federation(dataset, partition), knowledge, num_classes)


def structure_input(
    family: str, config: Any, user: UserGraph | None, seed: int, delta: float, title: str
) -> tuple[AttackInput, Scorer]:
    """The input of a link or attribute attack and the scorer holding its truth; refused at
    graph level (``user`` None), where no node or edge of a graph is asked about."""
    if user is None:
        raise NotApplicableError(
            f"{family} attacks ask about the nodes of one graph: node level only"
        )
    if getattr(config, "signal", None) == "embedding":
        raise NotApplicableError(
            "signal 'embedding': the audit reads your model's answers (posteriors), not its "
            "hidden layer"
        )
    if family == "link":
        return link_input(user, config, seed, delta, title)
    return attribute_input(user, config, seed, title)


def link_input(
    user: UserGraph, config: Any, seed: int, delta: float, title: str
) -> tuple[AttackInput, Scorer]:
    """He et al.'s challenge (``link_challenge``): edges against same-graph non-edges, plus
    uniform non-edges for ``auc_uniform``; the adversary knows a fifth of the edges and as
    many non-edges, none of them asked, and reads every node under a pseudonym. Scored as
    ``link_metrics`` scores a suite's row (an edge is the positive; the uniform pairs enter
    ``auc_uniform`` only), at ``delta``."""
    links = link_challenge(user.federation, derive_seed(seed, "link-challenge"))
    if not links.is_edge.any():
        raise NotApplicableError("link stealing: the graph has no edges left to ask about")
    knowledge = partial_graph(user.knowledge, links)
    pairs = links.pairs  # your graph's own ids, for the report; the attack reads pseudonyms
    ours = links.kind != "uniform"
    ids = np.char.add(np.char.add(pairs.src.astype(str), "-"), pairs.dst.astype(str))

    def score(out: AttackOutput) -> ScoreAudit:
        scores = np.asarray(out.scores, dtype=float)
        audit = audit_scores(
            scores[ours], links.is_edge[ours], ids=ids[ours], delta=delta, name=title, question=LINK
        )
        extras = link_extras(scores, links.is_edge, links.kind)
        return replace(audit, metrics={**audit.metrics, **extras})

    return link_attack_input(querier(user, knowledge, hops_of(config)), knowledge, links), score


def attribute_input(
    user: UserGraph, config: Any, seed: int, title: str
) -> tuple[AttackInput, Scorer]:
    """``attribute_challenge`` asked of the nodes outside the auxiliary pool (those whose
    attribute the adversary does not know; members and non-members alike, at most 2000): a
    pool node's label or column is the adversary's already, so asking it would only flatter
    the attack. A hidden column is blanked outside the pool (``column_hidden``); a label is
    known on the pool only. Scored by ``attribute_metrics``, accuracy with its interval."""
    outside = np.setdiff1d(np.arange(user.knowledge.graph.num_nodes), user.knowledge.aux_ids)
    task = attribute_challenge(
        user.federation, config.attribute, derive_seed(seed, "attribute-challenge"), among=outside
    )
    knowledge = column_hidden(user.knowledge, task.hidden)
    prior = value_fractions(known_values(knowledge, config.attribute), task.num_values)

    def score(out: AttackOutput) -> InferenceAudit:
        metrics = attribute_metrics(np.asarray(out.scores), task.truth, prior)
        return InferenceAudit(title, "attribute", metrics, SHOWN, f"{task.nodes.size} nodes")

    return AttackInput(querier(user, knowledge, hops_of(config)), knowledge, task.nodes), score


def querier(user: UserGraph, knowledge: BackgroundKnowledge, hops: int) -> QuerierView:
    """The model's answers at ``hops``, computed on the graph it serves (features and edges
    as they are); what the querier may query on its own is ``knowledge.graph``'s edges."""
    api = NodeQueryAPI(user.model, user.knowledge.graph)
    return QuerierView("node", user.num_classes, observed(api, (hops,), knowledge.graph, False))
