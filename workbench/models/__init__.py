"""GNN backbones shared by every target, built from one typed config."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from workbench.models.graph import GIN
from workbench.models.node import MLP, NodeGNN

NodeArch = Literal["gcn", "sage", "gat", "mlp"]


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    arch: Literal["gcn", "sage", "gat", "mlp", "gin"] = "gcn"
    hidden: int = Field(64, ge=1, le=4096)
    layers: int = Field(2, ge=1, le=8)
    dropout: float = Field(0.5, ge=0.0, lt=1.0)
    heads: int = Field(4, ge=1, le=16, description="attention heads (GAT only)")


def build_model(cfg: ModelConfig, in_dim: int, num_classes: int) -> nn.Module:
    if cfg.arch == "gin":
        return GIN(in_dim, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
    if cfg.arch == "mlp":
        return MLP(in_dim, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
    return NodeGNN(cfg.arch, in_dim, cfg.hidden, num_classes, cfg.layers, cfg.dropout, cfg.heads)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
