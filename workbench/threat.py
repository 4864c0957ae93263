"""Adversary views cut from a trained target, and the adversary's background knowledge.

A view holds only what that party observed: the external querier gets the released model's
query API; the honest-but-curious server gets the messages it received and the architecture
(so it can rebuild uploaded models); a curious client k gets what it received plus its own
data. None of them holds membership labels or the partition."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from torch import nn
from torch_geometric.data import Data

from workbench.data.datasets import Level, NodeDataset
from workbench.data.federation import Federation, GraphClient, NodeClient
from workbench.query import QueryAPI
from workbench.targets.base import TrainedTarget
from workbench.transcript import SERVER, Message, client


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
    make_model: Callable[[], nn.Module]


@dataclass(frozen=True)
class ClientView:
    level: Level
    num_classes: int
    client_id: int
    received: tuple[Message, ...]
    local: NodeClient | GraphClient
    make_model: Callable[[], nn.Module]


View = QuerierView | ServerView | ClientView
VIEWS = ("querier", "server", "client")


def querier_view(trained: TrainedTarget, federation: Federation) -> QuerierView:
    return QuerierView(trained.level, federation.dataset.num_classes, trained.query)


def server_view(trained: TrainedTarget, federation: Federation) -> ServerView:
    return ServerView(
        trained.level,
        federation.dataset.num_classes,
        federation.partition.num_clients,
        trained.transcript.received_by(SERVER),
        trained.make_model,
    )


def client_view(trained: TrainedTarget, federation: Federation, k: int) -> ClientView:
    return ClientView(
        trained.level,
        federation.dataset.num_classes,
        k,
        trained.transcript.received_by(client(k)),
        federation.clients[k],
        trained.make_model,
    )


@dataclass(frozen=True)
class BackgroundKnowledge:
    """The auxiliary pool: records from the same distribution that no client trained on.
    Node level: ids of population-graph nodes (queryable) with their labels; graph level:
    the graphs themselves."""

    level: Level
    aux_ids: np.ndarray
    aux_labels: np.ndarray
    aux_graphs: tuple[Data, ...] = ()


def background_knowledge(federation: Federation) -> BackgroundKnowledge:
    ds = federation.dataset
    aux = federation.partition.aux_ids
    graphs = () if isinstance(ds, NodeDataset) else tuple(ds.graphs[i] for i in aux.tolist())
    return BackgroundKnowledge(ds.level, aux, ds.labels[aux], graphs)
