"""Dataset containers. A node dataset is one graph; a graph dataset is a list of graphs.
Both expose ``labels`` so partitioners and splitters treat them alike."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch
from torch_geometric.data import Data

Level = Literal["node", "graph"]


@dataclass(frozen=True)
class EdgeTask:
    """Labelled directed edges to classify, e.g. transactions between accounts: ``index``
    [2, m] (source → target, population ids), ``attr`` [m, a] edge attributes (both endpoints'
    holders see them, as both banks see a transfer), ``y`` [m] classes, ``split`` [m] 0 train,
    1 validation, 2 test."""

    index: torch.Tensor
    attr: torch.Tensor
    y: torch.Tensor
    split: torch.Tensor
    num_classes: int = 2


@dataclass(frozen=True)
class NodeDataset:
    """One graph with node features ``x``, undirected ``edge_index`` and node labels ``y``;
    ``edge_task``, if any, labels edges too (the graph's edges are then its message-passing
    structure). ``public_split``, if any, is the dataset's published train/val/test node ids
    (Planetoid's 140/500/1000 on Cora), which papers evaluating on it use."""

    name: str
    data: Data
    num_classes: int
    level: Level = field(default="node", init=False)
    edge_task: EdgeTask | None = None
    public_split: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def num_items(self) -> int:
        return int(self.data.num_nodes)

    @property
    def num_features(self) -> int:
        return int(self.data.x.size(1))

    @property
    def labels(self) -> np.ndarray:
        return self.data.y.numpy(force=True)


@dataclass(frozen=True)
class GraphDataset:
    """Graphs with node features ``x`` and a graph label ``y`` of shape [1].

    ``source`` tells which member dataset each graph came from (``graph-mixture``, for
    cross-dataset settings); it is all zeros for a single dataset."""

    name: str
    graphs: list[Data]
    num_classes: int
    source_names: tuple[str, ...] = ()
    # x is computed from the structure (one-hot degrees, for datasets that ship no features):
    # whoever is told the features is told that much of the edges
    structural_features: bool = False
    level: Level = field(default="graph", init=False)

    @property
    def num_items(self) -> int:
        return len(self.graphs)

    @property
    def num_features(self) -> int:
        return int(self.graphs[0].x.size(1))

    @property
    def labels(self) -> np.ndarray:
        return np.array([int(g.y.view(-1)[0]) for g in self.graphs], dtype=np.int64)

    @property
    def source(self) -> np.ndarray:
        return np.array([int(getattr(g, "source", 0)) for g in self.graphs], dtype=np.int64)


Dataset = NodeDataset | GraphDataset


def graph_data(x: torch.Tensor, edge_index: torch.Tensor, label: int) -> Data:
    """A graph record in the layout every graph-level component expects."""
    return Data(x=x.float(), edge_index=edge_index.long(), y=torch.tensor([label]))


def to_device(dataset: Dataset, device: torch.device) -> Dataset:
    """The dataset with its tensors on ``device`` (moved once per cell); the loaded one is
    left as it was (PyG's ``Data.to`` works in place, so shallow copies are moved)."""
    if isinstance(dataset, NodeDataset):
        task = dataset.edge_task
        if task is not None:
            moved = {f: getattr(task, f).to(device) for f in ("index", "attr", "y", "split")}
            task = replace(task, **moved)
        return replace(dataset, data=copy.copy(dataset.data).to(device), edge_task=task)
    return replace(dataset, graphs=[copy.copy(g).to(device) for g in dataset.graphs])
