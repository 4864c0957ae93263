"""What an adversary is asked about: records (membership, attributes) or node pairs (links),
with only what the adversary may know of them; the truth about them stays with the scorer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch_geometric.data import Data

from fgl_workbench.data.datasets import Level


@dataclass(frozen=True)
class Candidates:
    """Records the adversary is asked about, with the class labels it is assumed to know."""

    level: Level
    ids: np.ndarray
    labels: np.ndarray
    graphs: tuple[Data, ...] = ()


@dataclass(frozen=True)
class NodePairs:
    """Node pairs the adversary is asked about (is there an edge?), as population-graph ids;
    shuffled, so position carries no information."""

    src: np.ndarray
    dst: np.ndarray

    def __len__(self) -> int:
        return int(self.src.size)
