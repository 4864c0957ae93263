"""GNN backbones shared by every target, built from one typed config. Imports only the shared
modules; every part above them may import it (docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fgl_workbench.errors import ConfigError
from fgl_workbench.models.graph import GIN
from fgl_workbench.models.node import MLP, NodeGNN
from fgl_workbench.storable import storable

NODE_ARCHS = ("gcn", "sage", "gat", "mlp")
GRAPH_ARCHS = ("gin",)


@storable
class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    arch: Literal["gcn", "sage", "gat", "mlp", "gin"] | None = Field(
        None, description="default: gcn for node-level data, gin for graph-level data"
    )
    hidden: int = Field(64, ge=1, le=4096)
    layers: int | None = Field(None, ge=1, le=8, description="default: 2 (node), 3 (graph)")
    dropout: float = Field(0.5, ge=0.0, lt=1.0)
    heads: int = Field(4, ge=1, le=16, description="attention heads (GAT only)")


def build_model(cfg: ModelConfig, in_dim: int, num_classes: int, level: str) -> nn.Module:
    valid = NODE_ARCHS if level == "node" else GRAPH_ARCHS
    arch = cfg.arch or valid[0]
    if arch not in valid:
        raise ConfigError(
            f"model.arch: '{arch}' does not fit {level}-level data; "
            f"valid choices: {', '.join(valid)}"
        )
    layers = cfg.layers or (2 if level == "node" else 3)
    if arch == "gin":
        return GIN(in_dim, cfg.hidden, num_classes, layers, cfg.dropout)
    if arch == "mlp":
        return MLP(in_dim, cfg.hidden, num_classes, layers, cfg.dropout)
    return NodeGNN(arch, in_dim, cfg.hidden, num_classes, layers, cfg.dropout, cfg.heads)


@storable
@dataclass(frozen=True)
class ModelSpec:
    """A released architecture: enough to build fresh copies of the model. Plain data, so it
    pickles into the worker processes that train reference and shadow models."""

    config: ModelConfig
    in_dim: int
    num_classes: int
    level: str

    def build(self) -> nn.Module:
        return build_model(self.config, self.in_dim, self.num_classes, self.level)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
