"""Adversary views cut from a trained target, and the adversary's background knowledge.

A view holds only what that party observed: the external querier gets the released model's
query API; the honest-but-curious server gets the messages it received and the architecture
(so it can rebuild uploaded models); a curious client k gets what it received plus its own
data. None of them holds membership labels or the partition."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch_geometric.data import Data

from attacks.base import Candidates
from workbench.data.datasets import Level, NodeDataset
from workbench.data.federation import Federation, GraphClient, NodeClient
from workbench.errors import NotApplicableError
from workbench.models import ModelSpec
from workbench.query import QueryAPI, ServedAPI
from workbench.targets.base import TrainedTarget
from workbench.targets.training import TrainingRecipe
from workbench.transcript import SERVER, Message, client

if TYPE_CHECKING:
    from workbench.challenges import LinkChallenge


@dataclass(frozen=True)
class QuerierView:
    level: Level
    num_classes: int
    api: QueryAPI


@dataclass(frozen=True)
class ServerView:
    level: Level
    num_classes: int
    num_clients: int
    received: tuple[Message, ...]
    spec: ModelSpec  # the server built the architecture, so it can rebuild uploaded models
    sent: tuple[Message, ...] = ()  # what the server itself sent (the global models)


@dataclass(frozen=True)
class ClientView:
    level: Level
    num_classes: int
    client_id: int
    received: tuple[Message, ...]
    local: NodeClient | GraphClient
    spec: ModelSpec


@dataclass(frozen=True)
class ServedView:
    """An external querier of the clients' deployments: posteriors by node id, computed on
    each client's private subgraph (link stealing's adversary)."""

    level: Level
    num_classes: int
    api: ServedAPI


View = QuerierView | ServerView | ClientView | ServedView
VIEWS = ("querier", "server", "client", "served")


def querier_view(trained: TrainedTarget, federation: Federation) -> QuerierView:
    return QuerierView(trained.level, federation.dataset.num_classes, trained.query)


def served_view(trained: TrainedTarget, federation: Federation) -> ServedView:
    if trained.served is None:
        raise NotApplicableError(
            f"target {trained.name} serves no per-client posteriors (graph level, or an "
            "embedding release)"
        )
    return ServedView(trained.level, federation.dataset.num_classes, trained.served)


def server_view(trained: TrainedTarget, federation: Federation) -> ServerView:
    return ServerView(
        trained.level,
        federation.dataset.num_classes,
        federation.partition.num_clients,
        trained.transcript.received_by(SERVER),
        trained.spec,
        tuple(m for m in trained.transcript.messages if m.sender == SERVER),
    )


def client_view(trained: TrainedTarget, federation: Federation, k: int) -> ClientView:
    return ClientView(
        trained.level,
        federation.dataset.num_classes,
        k,
        trained.transcript.received_by(client(k)),
        federation.clients[k],
        trained.spec,
    )


@dataclass(frozen=True)
class BackgroundKnowledge:
    """What the adversary knows besides its view.

    - The auxiliary pool: records from the same distribution that no client trained on, with
      labels. Node level: ids of population-graph nodes; graph level: the graphs themselves.
    - Node level: the population graph's features and edges (no labels, no masks, no
      partition), as Olatunji et al. assume; shadow and reference models run on it.
    - The architecture and training recipe of the target (Kerckhoffs's principle)."""

    level: Level
    aux_ids: np.ndarray
    aux_labels: np.ndarray
    aux_graphs: tuple[Data, ...]
    graph: Data | None
    spec: ModelSpec
    recipe: TrainingRecipe
    known_non_edges: np.ndarray | None = None  # link inference: pairs known to be unlinked

    @property
    def aux(self) -> Candidates:
        return Candidates(self.level, self.aux_ids, self.aux_labels, self.aux_graphs)


def link_knowledge(
    federation: Federation, trained: TrainedTarget, challenge: LinkChallenge
) -> BackgroundKnowledge:
    """A link adversary's knowledge: the auxiliary pool, the population's node features, and
    of its edges only the known share of the challenge (``graph.edge_index``, both directions)
    with as many known non-edges. The edges it is asked about are nowhere in it."""
    base = background_knowledge(federation, trained)
    assert base.graph is not None
    known = torch.from_numpy(challenge.known_edges)
    graph = Data(
        x=base.graph.x,
        edge_index=torch.cat([known, known.flip(0)], 1),
        num_nodes=base.graph.num_nodes,
    )
    return replace(base, graph=graph, known_non_edges=challenge.known_non_edges)


def attribute_knowledge(
    federation: Federation, trained: TrainedTarget, hidden: int | None
) -> BackgroundKnowledge:
    """An attribute adversary's knowledge: as usual, except that a hidden feature column is
    known only on the auxiliary pool (zero elsewhere); a hidden label is known there anyway."""
    base = background_knowledge(federation, trained)
    if hidden is None or base.graph is None:
        return base
    x = base.graph.x.clone()
    keep = x[torch.from_numpy(base.aux_ids), hidden].clone()
    x[:, hidden] = 0.0
    x[torch.from_numpy(base.aux_ids), hidden] = keep
    return replace(base, graph=Data(x=x, edge_index=base.graph.edge_index, num_nodes=x.shape[0]))


def background_knowledge(federation: Federation, trained: TrainedTarget) -> BackgroundKnowledge:
    ds = federation.dataset
    aux = federation.partition.aux_ids
    if isinstance(ds, NodeDataset):
        graphs: tuple[Data, ...] = ()
        graph = Data(x=ds.data.x, edge_index=ds.data.edge_index, num_nodes=ds.num_items)
    else:
        graphs, graph = tuple(ds.graphs[i] for i in aux.tolist()), None
    return BackgroundKnowledge(
        ds.level, aux, ds.labels[aux], graphs, graph, trained.spec, trained.recipe
    )
