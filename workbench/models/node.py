"""Node-classification backbones. ``embed`` returns the last hidden representation, the
quantity embedding-based attacks and defenses work on."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from fgl_workbench.models.functional import dropout as fast_dropout
from fgl_workbench.models.sparse import operator


class NodeGNN(nn.Module):
    """``layers`` message-passing layers (GCN, GraphSAGE-mean or GAT) with ReLU, dropout between.
    GCN and GraphSAGE aggregate by a sparse product (``models.sparse``), GAT over edges."""

    def __init__(
        self,
        conv: str,
        in_dim: int,
        hidden: int,
        out_dim: int,
        layers: int = 2,
        dropout: float = 0.5,
        heads: int = 4,
    ) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = nn.ModuleList(
            _conv(conv, dims[i], dims[i + 1], heads, last=i == layers - 1) for i in range(layers)
        )
        self.dropout = dropout

    def embed(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        # Dropout between layers only, not on the input features (as FedTAD's reference GCN).
        weight = self._weight(edge_weight)
        for i, conv in enumerate(self.convs[:-1]):
            if i:
                x = fast_dropout(x, self.dropout, self.training)
            x = F.relu(conv(x, edge_index, *weight))
        return x

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = fast_dropout(self.embed(x, edge_index, edge_weight), self.dropout, self.training)
        return self.convs[-1](h, edge_index, *self._weight(edge_weight))

    def _weight(self, edge_weight: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """Weighted edges (a condensed graph's dense A') exist for GCN only."""
        if edge_weight is None:
            return ()
        if not isinstance(self.convs[0], GCNConv):
            raise ValueError("model.arch: weighted edges need 'gcn'")
        return (edge_weight,)


class SparseGCNConv(GCNConv):
    """PyG's ``GCNConv`` (same parameters, so weights and snapshots carry over) aggregating
    with the graph's normalised Â, built once per graph (``models.sparse``). Weighted edges
    (a condensed graph's learnt A') keep PyG's edge-wise path."""

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, edge_weight: torch.Tensor | None = None
    ) -> torch.Tensor:
        if edge_weight is not None:
            return super().forward(x, edge_index, edge_weight)
        adjacency = operator(edge_index, x.size(0), "gcn", x.dtype)
        out = adjacency.times(self.lin(x))
        return out if self.bias is None else out + self.bias


class SparseSAGEConv(SAGEConv):
    """PyG's mean ``SAGEConv`` (same parameters) aggregating with the graph's mean operator,
    built once per graph (``models.sparse``)."""

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        mean = operator(edge_index, x.size(0), "mean", x.dtype).times(x.contiguous())
        return self.lin_l(mean) + self.lin_r(x)


def _conv(kind: str, i: int, o: int, heads: int, last: bool) -> nn.Module:
    if kind == "gcn":
        return SparseGCNConv(i, o)
    if kind == "sage":
        return SparseSAGEConv(i, o, aggr="mean")
    if kind == "gat":
        # Hidden layers concatenate heads of size o / heads; the output layer averages them.
        if last:
            return GATConv(i, o, heads=heads, concat=False)
        if o % heads:
            raise ValueError(f"model.hidden={o} must be divisible by model.heads={heads} for GAT")
        return GATConv(i, o // heads, heads=heads)
    raise ValueError(f"unknown conv '{kind}'")


class MLP(nn.Module):
    """Structure-blind baseline with the same call signature as the GNNs."""

    def __init__(
        self, in_dim: int, hidden: int, out_dim: int, layers: int = 2, dropout: float = 0.5
    ) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.lins = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(layers))
        self.dropout = dropout

    def embed(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        for i, lin in enumerate(self.lins[:-1]):
            if i:
                x = fast_dropout(x, self.dropout, self.training)
            x = F.relu(lin(x))
        return x

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor | None = None) -> torch.Tensor:
        return self.lins[-1](fast_dropout(self.embed(x), self.dropout, self.training))
