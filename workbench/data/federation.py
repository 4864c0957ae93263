"""A federation: what each client holds locally, cut from a dataset by a partition.

A node-level client holds the subgraph induced by its nodes (cut edges are dropped) with local
masks and the global id of every local node; a graph-level client holds its graphs by split.

This is the one place every target's local graphs come from, so the partition's
``membership`` is applied here. ``transductive``: the whole local subgraph (test and
unlabelled nodes sit in it, unlabelled for training). ``inductive``: only the subgraph the
client's training nodes induce, and beside it, as a separate component with no edge to a
training node, the subgraph its validation nodes induce, so release rules and early stopping
still select on validation. Validation nodes are neither members nor non-members of the
membership challenge; kept apart, they never enter a member's neighbourhood. Test nodes (the
non-members) and unlabelled nodes are absent with all their edges: the client's test mask
is empty, so a target's own test scores are NaN and the runner scores the released model on
the test nodes instead (``fgl_workbench.targets.training.score_released``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.data.datasets import Dataset, GraphDataset, NodeDataset
from fgl_workbench.data.partition import ClientPart, Partition
from fgl_workbench.errors import ConfigError

if TYPE_CHECKING:
    from fgl_workbench.data.recipe import FederationRecipe


@dataclass(frozen=True)
class NodeClient:
    client_id: int
    data: Data  # x, edge_index (local ids), y, train/val/test masks, global_id

    @property
    def num_nodes(self) -> int:
        return int(self.data.num_nodes)


@dataclass(frozen=True)
class GraphClient:
    client_id: int
    train: list[Data]
    val: list[Data]
    test: list[Data]

    @property
    def num_graphs(self) -> int:
        return len(self.train) + len(self.val) + len(self.test)


@dataclass(frozen=True)
class Federation:
    dataset: Dataset
    partition: Partition
    clients: tuple[NodeClient, ...] | tuple[GraphClient, ...]
    # how it was cut, where known (a suite's cells): what a machine holding the dataset
    # rebuilds a client from (the flower target's SuperNodes)
    recipe: FederationRecipe | None = None

    @property
    def level(self) -> str:
        return self.dataset.level


def build_federation(
    dataset: Dataset, partition: Partition, recipe: FederationRecipe | None = None
) -> Federation:
    clients = tuple(local_client(dataset, partition, c.client_id) for c in partition.clients)
    return Federation(dataset, partition, clients, recipe)  # type: ignore[arg-type]


def local_client(dataset: Dataset, partition: Partition, k: int) -> NodeClient | GraphClient:
    """Client k's local data, cut from the dataset by the partition."""
    part = partition.clients[k]
    if isinstance(dataset, NodeDataset):
        return node_client(dataset, part, partition.membership == "inductive")
    return _graph_client(dataset, part)  # type: ignore[arg-type]


def refuse_inductive(federation: Federation, target: str, reason: str) -> None:
    """For a target that builds its training graphs from the population graph rather than
    from its clients' local graphs: an inductive federation is refused, never trained
    transductively behind the setting's back."""
    if federation.partition.membership == "inductive":
        raise ConfigError(
            f"partition.membership: '{target}' cannot train inductively: {reason}; use "
            "membership: transductive"
        )


def node_client(dataset: NodeDataset, part: ClientPart, inductive: bool = False) -> NodeClient:
    """The client's local graph: its whole induced subgraph, or (``inductive``) the subgraphs
    its training and its validation nodes induce, side by side."""
    kept = np.union1d(part.train, part.val) if inductive else part.ids
    ids = torch.as_tensor(kept)
    edge_index, _ = subgraph(
        ids, dataset.data.edge_index, relabel_nodes=True, num_nodes=dataset.num_items
    )
    n = ids.numel()

    def mask(sub: np.ndarray) -> torch.Tensor:
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.as_tensor(np.searchsorted(kept, sub))] = True
        return m

    train = mask(part.train)
    if inductive:  # no edge between the two components
        side = train.to(edge_index.device)
        edge_index = edge_index[:, side[edge_index[0]] == side[edge_index[1]]]
    data = Data(
        x=dataset.data.x[ids],
        edge_index=edge_index,
        y=dataset.data.y[ids],
        train_mask=train,
        val_mask=mask(part.val),
        test_mask=mask(part.test[:0] if inductive else part.test),
        global_id=ids,
    )
    return NodeClient(part.client_id, data)


def _graph_client(dataset: GraphDataset, part: ClientPart) -> GraphClient:
    def pick(sub: np.ndarray) -> list[Data]:
        return [dataset.graphs[i] for i in sub.tolist()]

    return GraphClient(part.client_id, pick(part.train), pick(part.val), pick(part.test))
