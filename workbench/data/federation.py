"""A federation: what each client holds locally, cut from a dataset by a partition.

A node-level client holds the subgraph induced by its nodes (cut edges are dropped) with local
masks and the global id of every local node; a graph-level client holds its graphs by split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.data.datasets import Dataset, GraphDataset, NodeDataset
from fgl_workbench.data.partition import ClientPart, Partition


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

    @property
    def level(self) -> str:
        return self.dataset.level


def build_federation(dataset: Dataset, partition: Partition) -> Federation:
    if isinstance(dataset, NodeDataset):
        clients = tuple(node_client(dataset, c) for c in partition.clients)
    else:
        clients = tuple(_graph_client(dataset, c) for c in partition.clients)
    return Federation(dataset, partition, clients)  # type: ignore[arg-type]


def node_client(dataset: NodeDataset, part: ClientPart) -> NodeClient:
    ids = torch.as_tensor(part.ids)
    edge_index, _ = subgraph(
        ids, dataset.data.edge_index, relabel_nodes=True, num_nodes=dataset.num_items
    )
    n = ids.numel()

    def mask(sub: np.ndarray) -> torch.Tensor:
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.as_tensor(np.searchsorted(part.ids, sub))] = True
        return m

    data = Data(
        x=dataset.data.x[ids],
        edge_index=edge_index,
        y=dataset.data.y[ids],
        train_mask=mask(part.train),
        val_mask=mask(part.val),
        test_mask=mask(part.test),
        global_id=ids,
    )
    return NodeClient(part.client_id, data)


def _graph_client(dataset: GraphDataset, part: ClientPart) -> GraphClient:
    def pick(sub: np.ndarray) -> list[Data]:
        return [dataset.graphs[i] for i in sub.tolist()]

    return GraphClient(part.client_id, pick(part.train), pick(part.val), pick(part.test))
