"""Everything but Flower: Cora, the clients' shares of it, and the GCN they train.

Split: the 2,708 nodes are shuffled by a seeded permutation and cut into ``num_partitions``
disjoint, nearly equal parts; client ``k`` owns part ``k``. A client sees only the subgraph
induced by its own nodes (edges to other clients' nodes are dropped), the way a graph held by
separate organisations is seen. Inside its part, a second seeded shuffle puts 60 % of the
client's nodes in training and the rest in testing. The split depends on the seed and
``num_partitions`` alone, so every process (simulation, SuperNode, test) rebuilds the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv
from torch_geometric.utils import subgraph

# Cora's shape, known to the ServerApp without loading the data (it holds none).
NUM_FEATURES = 1433
NUM_CLASSES = 7
HIDDEN = 16
SPLIT_SEED = 0
TRAIN_FRACTION = 0.6
WEIGHT_DECAY = 5e-4


class GCN(nn.Module):
    """Two GCN layers with ReLU and dropout between them (Kipf & Welling)."""

    def __init__(
        self,
        in_dim: int = NUM_FEATURES,
        hidden: int = HIDDEN,
        out_dim: int = NUM_CLASSES,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_dim, hidden)
        self.conv2 = GCNConv(hidden, out_dim)
        self.dropout = dropout

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = F.relu(self.conv1(x, edge_index))
        h = F.dropout(h, p=self.dropout, training=self.training)
        return self.conv2(h, edge_index)


def initial_model(seed: int = 0) -> GCN:
    """The global model before round 1 (seeded, so a run's start is reproducible)."""
    torch.manual_seed(seed)
    return GCN()


@dataclass(frozen=True)
class Partition:
    """One client's induced subgraph, its nodes renumbered 0..n-1."""

    nodes: Tensor  # the client's node ids in the full graph (sorted)
    x: Tensor
    edge_index: Tensor
    y: Tensor
    train_mask: Tensor
    test_mask: Tensor

    @property
    def num_train(self) -> int:
        return int(self.train_mask.sum())

    @property
    def num_test(self) -> int:
        return int(self.test_mask.sum())


@lru_cache(maxsize=1)
def _cora() -> tuple[Tensor, Tensor, Tensor]:
    """Cora's features, undirected edges and labels.

    Read through the workbench's loader: it finds the raw files under ``$FGLWB_DATA`` and
    keeps PyG's processed files in ``$FGLWB_CACHE``, never beside the raw ones. A user
    outside the workbench would call ``torch_geometric.datasets.Planetoid(root, "Cora")``.
    """
    from fgl_workbench.data.catalog import load_dataset

    data = load_dataset("Cora").data
    return data.x, data.edge_index, data.y


def node_parts(num_nodes: int, num_partitions: int, seed: int = SPLIT_SEED) -> list[Tensor]:
    """The disjoint node sets of all clients, each sorted."""
    if not 1 <= num_partitions <= num_nodes:
        raise ValueError(f"num_partitions must be in 1..{num_nodes}, got {num_partitions}")
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    return [part.sort().values for part in perm.tensor_split(num_partitions)]


def load_partition(partition_id: int, num_partitions: int, seed: int = SPLIT_SEED) -> Partition:
    """Client ``partition_id``'s share of Cora (see the module's docstring)."""
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} is not in 0..{num_partitions - 1}")
    x, edge_index, y = _cora()
    nodes = node_parts(x.size(0), num_partitions, seed)[partition_id]
    local_edges, _ = subgraph(nodes, edge_index, relabel_nodes=True, num_nodes=x.size(0))
    order = torch.randperm(
        nodes.numel(), generator=torch.Generator().manual_seed(seed + 1 + partition_id)
    )
    train_mask = torch.zeros(nodes.numel(), dtype=torch.bool)
    train_mask[order[: int(TRAIN_FRACTION * nodes.numel())]] = True
    return Partition(nodes, x[nodes], local_edges, y[nodes], train_mask, ~train_mask)


def train(model: GCN, part: Partition, epochs: int, lr: float) -> float:
    """Full-batch Adam on the client's training nodes; the last epoch's loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(epochs):
        optimizer.zero_grad()
        out = model(part.x, part.edge_index)
        loss = F.cross_entropy(out[part.train_mask], part.y[part.train_mask])
        loss.backward()
        optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model: GCN, part: Partition) -> tuple[float, float]:
    """Loss and accuracy on the client's test nodes."""
    model.eval()
    out = model(part.x, part.edge_index)[part.test_mask]
    y = part.y[part.test_mask]
    loss = F.cross_entropy(out, y)
    accuracy = (out.argmax(1) == y).float().mean()
    return float(loss), float(accuracy)
