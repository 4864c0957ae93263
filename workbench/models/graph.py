"""Graph-classification backbone: GIN with mean pooling (as in GCFL and CeFGC)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GINConv, global_mean_pool

from fgl_workbench.models.functional import dropout as fast_dropout


class GIN(nn.Module):
    """Linear input projection, ``layers`` GINConv(MLP) blocks, mean pooling, linear head."""

    def __init__(
        self, in_dim: int, hidden: int, out_dim: int, layers: int = 3, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.project = nn.Linear(in_dim, hidden)
        self.convs = nn.ModuleList(
            GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)))
            for _ in range(layers)
        )
        self.head = nn.Linear(hidden, out_dim)
        self.dropout = dropout

    def embed(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        x = self.project(x)
        for conv in self.convs:
            x = fast_dropout(F.relu(conv(x, edge_index)), self.dropout, self.training)
        return global_mean_pool(x, batch)

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor
    ) -> torch.Tensor:
        return self.head(self.embed(x, edge_index, batch))
