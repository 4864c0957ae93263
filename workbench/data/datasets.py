"""Dataset containers. A node dataset is one graph; a graph dataset is a list of graphs.
Both expose ``labels`` so partitioners and splitters treat them alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch_geometric.data import Data

Level = Literal["node", "graph"]


@dataclass(frozen=True)
class NodeDataset:
    """One graph with node features ``x``, undirected ``edge_index`` and node labels ``y``."""

    name: str
    data: Data
    num_classes: int
    level: Level = field(default="node", init=False)

    @property
    def num_items(self) -> int:
        return int(self.data.num_nodes)

    @property
    def num_features(self) -> int:
        return int(self.data.x.size(1))

    @property
    def labels(self) -> np.ndarray:
        return self.data.y.numpy()


@dataclass(frozen=True)
class GraphDataset:
    """Graphs with node features ``x`` and a graph label ``y`` of shape [1].

    ``source`` tells which member dataset each graph came from (``graph-mixture``, for
    cross-dataset settings); it is all zeros for a single dataset."""

    name: str
    graphs: list[Data]
    num_classes: int
    source_names: tuple[str, ...] = ()
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
