"""FedProx (Li et al., MLSys 2020) as a third-party target: node-level FedAvg whose clients
add the proximal term μ/2 · ‖w − w_global‖² to their local loss, which keeps heterogeneous
clients from drifting far from the model they received.

Everything else (rounds, client sampling, the transcript, the defenses FedAvg supports, the
query API, the recipe that retrains it for shadow and reference models) is the workbench's
FedAvg loop, reused by subclassing; only local training changes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from fgl_workbench.data.federation import Federation, NodeClient
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets import TrainedTarget
from fgl_workbench.targets.fedavg import FedAvgConfig, NodeFedAvg


class FedProxConfig(FedAvgConfig):
    mu: float = Field(0.01, ge=0.0, description="proximal weight μ (0: FedAvg)")


def proximal_term(model: nn.Module, anchor: list[torch.Tensor]) -> torch.Tensor:
    """½ ‖w − w_global‖² over every parameter."""
    return 0.5 * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor, strict=True))


class FedProx(NodeFedAvg):
    name = "fedprox"
    level = "node"
    Config = FedProxConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        if federation.level != "node":
            raise ConfigError("targets.name: fedprox (this example) is node-level only")
        cfg = config if isinstance(config, FedProxConfig) else FedProxConfig(**(config or {}))
        return super().fit(federation, cfg, defenses, seed)

    @staticmethod
    def train_local(model: nn.Module, c: NodeClient, opt, cfg: FedProxConfig, gen, dp_sgd) -> int:
        anchor = [p.detach().clone() for p in model.parameters()]  # the received global model
        data = c.data
        model.train()
        for _ in range(cfg.local_epochs):
            opt.zero_grad()
            loss = F.cross_entropy(
                model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]
            )
            (loss + cfg.mu * proximal_term(model, anchor)).backward()
            opt.step()
        return 0
