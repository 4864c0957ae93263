"""Adversary views cut from a trained target, and the adversary's background knowledge.

A view holds only what that party observed: the external querier gets the released model's
query API; the honest-but-curious server gets the messages it received and the architecture
(so it can rebuild uploaded models); a curious client k gets what it received plus its own
data. None of them holds membership labels or the partition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.accountants import MetricGaussian
from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.exchanged import Combine, ExchangedEmbeddings, exchanged_embeddings
from fgl_workbench.data.datasets import Level, NodeDataset
from fgl_workbench.data.federation import Federation, GraphClient, NodeClient
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.models import ModelSpec
from fgl_workbench.query import QueryAPI, ServedAPI, observed
from fgl_workbench.targets.base import TrainedTarget
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.transcript import SERVER, Message, client


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

    def last_payload(self, sender: str, kind: str) -> Any:
        """The payload of the last ``kind`` message ``sender`` uploaded that the transcript
        kept, or None."""
        kept = [
            m.payload
            for m in self.received
            if m.sender == sender and m.kind == kind and m.payload is not None
        ]
        return kept[-1] if kept else None


@dataclass(frozen=True)
class ClientView:
    level: Level
    num_classes: int
    client_id: int
    received: tuple[Message, ...]
    local: NodeClient | GraphClient
    spec: ModelSpec
    sent: tuple[Message, ...] = ()  # what the client itself uploaded
    keys: Any = None  # its secret key material (it can decrypt what it receives)


@dataclass(frozen=True)
class ServedView:
    """An external querier of the clients' deployments: posteriors by node id, computed on
    each client's private subgraph (link stealing's adversary)."""

    level: Level
    num_classes: int
    api: ServedAPI


@dataclass(frozen=True)
class InsiderView:
    """A member of the federation (the server, or any client: each holds the released model
    it deploys) reading node embeddings as anyone can: the white-box released model and the
    embeddings the target gives out (``api``: the clients' deployments, or the release)."""

    level: Level
    num_classes: int
    model: nn.Module
    api: QueryAPI | ServedAPI | ExchangedEmbeddings


@dataclass(frozen=True)
class ReleaseView:
    """An adversary auditing a metric-DP release: the noisy vectors released for one node of
    each candidate pair (NaN past that node's release count), the two candidates' clean
    vectors at each release, and the mechanism's σ0."""

    level: Level
    releases: np.ndarray  # [pairs, releases, dim]
    first: np.ndarray  # [pairs, releases, dim]
    second: np.ndarray
    sigma0: float


View = QuerierView | ServerView | ClientView | ServedView | InsiderView | ReleaseView


def querier_view(
    trained: TrainedTarget,
    federation: Federation,
    knowledge: BackgroundKnowledge | None = None,
    hops: Sequence[int] = (0, 1, 2),
    embeddings: bool = True,
) -> QuerierView:
    """The external querier: the released deployment's answers at each of ``hops``
    (computed on the data the deployment holds; node embeddings only with ``embeddings``),
    with the edges of the graph the querier knows (default: the population's) for queries
    of its own."""
    known = (knowledge or background_knowledge(federation, trained)).graph
    api = observed(trained.query, hops, known, embeddings)
    return QuerierView(trained.level, federation.dataset.num_classes, api)


def served_view(
    trained: TrainedTarget,
    federation: Federation,
    probed: np.ndarray | None = None,
    step: float | None = None,
) -> ServedView:
    """The querier of the clients' deployments: their answers by node id, and their answers
    after it changed each ``probed`` node's features by ``step``."""
    if trained.served is None:
        raise NotApplicableError(
            f"target {trained.name} serves no per-client posteriors (graph level, an "
            "embedding release, or personalised models reached only through the query API)"
        )
    api = trained.served.observed(np.zeros(0) if probed is None else probed, step)
    return ServedView(trained.level, federation.dataset.num_classes, api)


def insider_view(
    trained: TrainedTarget,
    federation: Federation,
    source: str,
    combine: Combine = "last",
    known: Data | None = None,
    hops: Sequence[int] = (0, 1, 2),
) -> InsiderView:
    """``source``: ``served`` (each client's deployment answers on its private subgraph),
    ``release`` (what an external querier gets: a published table, or the released model's
    answers on the population graph) or ``exchanged`` (the server reading the embeddings the
    clients exchanged through it, each node's last release or, ``combine: mean``, the mean of
    its releases). ``known`` and ``hops``: the graph the insider knows and the neighbourhood
    size of its release queries."""
    api: QueryAPI | ServedAPI | ExchangedEmbeddings
    if source == "served":
        api = served_view(trained, federation).api
    elif source == "exchanged":  # the metric-DP protocol (normalise, then noise) is public
        normalised = any(isinstance(e, MetricGaussian) for e in trained.ledger.metric().events)
        api = exchanged_embeddings(trained.transcript.received_by(SERVER), normalised, combine)
    else:
        api = observed(trained.query, hops, known)
    model = trained.spec.build()
    model.load_state_dict(trained.global_model.state_dict())
    return InsiderView(trained.level, federation.dataset.num_classes, model.eval(), api)


def server_view(trained: TrainedTarget, federation: Federation) -> ServerView:
    return ServerView(
        trained.level,
        federation.dataset.num_classes,
        federation.partition.num_clients,
        trained.transcript.received_by(SERVER),
        trained.spec,
        tuple(m for m in trained.transcript.messages if m.sender == SERVER),
    )


def curious_client(federation: Federation, k: int) -> int:
    """``k`` as one of ``federation``'s clients: an index outside them is refused, never
    read from the other end (``clients[-1]``) or as no client at all."""
    if not 0 <= k < len(federation.clients):
        raise NotApplicableError(
            f"attacks.params.client: expected a client index in [0, "
            f"{len(federation.clients) - 1}] (got {k})"
        )
    return k


def client_view(trained: TrainedTarget, federation: Federation, k: int) -> ClientView:
    k = curious_client(federation, k)
    return ClientView(
        trained.level,
        federation.dataset.num_classes,
        k,
        trained.transcript.received_by(client(k)),
        federation.clients[k],
        trained.spec,
        tuple(m for m in trained.transcript.messages if m.sender == client(k)),
        trained.keys,
    )


@dataclass(frozen=True)
class ClientShape:
    """What a server knows of client k's data without seeing it: how many nodes it holds and
    how many are labelled (the batch size gradient inversion assumes), and, for an attacker
    granted the structure, k's edges (local ids) and which nodes are labelled."""

    num_nodes: int
    num_train: int
    edge_index: np.ndarray | None = None
    train_mask: np.ndarray | None = None


@dataclass(frozen=True)
class ClientNodes:
    """What a structure adversary is told of client k's data: its nodes' features, one row
    per node in an order the challenge drew (pairs are asked about by row; neither k's local
    order nor population ids, whose order is structure of its own), and which of them are
    labelled, with those labels. Never its edges, which it is asked to recover (GraphMI's
    adversary, Zhang et al. 2021)."""

    x: torch.Tensor
    labelled: np.ndarray  # local ids of the labelled nodes
    labels: np.ndarray  # their labels


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
    client_shape: ClientShape | None = None  # gradient inversion: the victim client's shape
    # structure inversion: the victim client's nodes, or (graph level) its training graphs
    # with their features and labels and no edges
    client_nodes: ClientNodes | tuple[Data, ...] | None = None

    def aux_features(self) -> torch.Tensor:
        """The auxiliary pool's feature rows (node level): the adversary's prior over what a
        node looks like."""
        assert self.graph is not None
        return self.graph.x[torch.as_tensor(self.aux_ids)]

    def aux_feature_range(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-feature minimum, maximum and mean over the pool (float64): the box a
        reconstruction is kept in, and where it starts."""
        x = self.aux_features().double()
        return x.min(0).values, x.max(0).values, x.mean(0)

    @property
    def aux(self) -> Candidates:
        return Candidates(self.level, self.aux_ids, self.aux_labels, self.aux_graphs)


def attribute_knowledge(
    federation: Federation, trained: TrainedTarget, hidden: int | None
) -> BackgroundKnowledge:
    """An attribute adversary's knowledge: as usual, except that a hidden feature column is
    known only on the auxiliary pool (zero elsewhere); a hidden label is known there anyway."""
    return column_hidden(background_knowledge(federation, trained), hidden)


def column_hidden(base: BackgroundKnowledge, hidden: int | None) -> BackgroundKnowledge:
    """``base`` with feature column ``hidden`` zeroed outside the auxiliary pool (``base``
    itself where no column is hidden): what the attribute adversary is told of it."""
    if hidden is None or base.graph is None:
        return base
    x = base.graph.x.clone()
    keep = x[torch.as_tensor(base.aux_ids), hidden].clone()
    x[:, hidden] = 0.0
    x[torch.as_tensor(base.aux_ids), hidden] = keep
    return replace(base, graph=Data(x=x, edge_index=base.graph.edge_index, num_nodes=x.shape[0]))


def client_data_knowledge(
    federation: Federation, trained: TrainedTarget, k: int, structure: bool
) -> BackgroundKnowledge:
    """A reconstructing server's knowledge of client ``k``: its node counts (and with
    ``structure`` its edges and labelled nodes), and the population's features with every
    node of k's blanked, so nothing of what it reconstructs is known to it already."""
    base = background_knowledge(federation, trained)
    c = federation.clients[k]
    if not isinstance(c, NodeClient) or base.graph is None:
        raise NotApplicableError("reconstructing a client's data needs node-level clients")
    x = base.graph.x.clone()
    x[c.data.global_id] = 0.0
    graph = Data(x=x, edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=x.shape[0])
    mask = c.data.train_mask
    shape = ClientShape(
        c.num_nodes,
        int(mask.sum()),
        c.data.edge_index.numpy(force=True) if structure else None,
        mask.numpy(force=True) if structure else None,
    )
    return replace(base, graph=graph, client_shape=shape)


def feature_knowledge(
    federation: Federation, trained: TrainedTarget, nodes: np.ndarray, known_edges: float, seed: int
) -> BackgroundKnowledge:
    """A feature-inversion adversary's knowledge: the population's features with the target
    ``nodes`` blanked (CE-FedGNN's adversary knows the other nodes, B), and each edge of the
    population graph independently with probability ``known_edges``."""
    base = background_knowledge(federation, trained)
    assert base.graph is not None
    x = base.graph.x.clone()
    x[torch.as_tensor(nodes)] = 0.0
    src, dst = base.graph.edge_index
    keep = torch.as_tensor(np.random.default_rng(seed).random(src.numel()) < known_edges)
    keep &= src < dst
    edges = torch.stack([src[keep], dst[keep]])
    graph = Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], 1), num_nodes=x.shape[0])
    return replace(base, graph=graph)


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
