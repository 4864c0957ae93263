"""Node-classification backbones. ``embed`` returns the last hidden representation, the
quantity embedding-based attacks and defenses work on."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from fgl_workbench.models.functional import dropout as fast_dropout


class NodeGNN(nn.Module):
    """``layers`` message-passing layers (GCN, GraphSAGE-mean or GAT) with ReLU, dropout between."""

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


def _conv(kind: str, i: int, o: int, heads: int, last: bool) -> nn.Module:
    if kind == "gcn":
        return GCNConv(i, o)
    if kind == "sage":
        return SAGEConv(i, o, aggr="mean")
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
