"""Early-stopped local training from a given model: O-pFGL's two stages, and the local
fine-tuning after a federated run that personalised-FL papers give their baselines
(O-pFGL's "FedAvg + FT").

A stage runs full batch with Adam for up to ``epochs`` epochs, scores the client's validation
nodes every ``eval_every`` epochs, stops after ``patience`` scorings without a better one, and
keeps the best-scoring weights, the starting ones included (O-pFGL's official schedule): a
stage never deploys a model its client's validation nodes score below where it started."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from torch_geometric.data import Data


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    lr: float = Field(1e-4, gt=0.0)
    epochs: int = Field(3000, ge=0, le=100_000, description="0: the stage is skipped")
    eval_every: int = Field(100, ge=1, le=100_000)
    patience: int = Field(10, ge=1, le=10_000, description="scorings without improvement")

    @model_validator(mode="after")
    def _scored_at_least_once(self) -> StageConfig:
        if 0 < self.epochs < self.eval_every:
            raise ValueError(
                f"eval_every ({self.eval_every}) is above epochs ({self.epochs}): the stage "
                "would never be scored and would keep its starting weights"
            )
        return self


@torch.no_grad()
def val_accuracy(model: nn.Module, data: Data) -> float:
    model.eval()
    mask = data.val_mask
    if not bool(mask.any()):
        return 0.0
    pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[mask] == data.y[mask]).float().mean())


class Trained(NamedTuple):
    model: nn.Module
    epoch: int  # the epoch whose weights were kept (0: the starting ones)


def train_stage(
    model: nn.Module, loss: Callable[[nn.Module], torch.Tensor], local: Data, cfg: StageConfig
) -> Trained:
    """``model`` trained on ``loss``, early-stopped on ``local``'s validation accuracy; the
    best weights are loaded back (the initial ones if no scoring beat them). Without
    validation nodes there is nothing to stop on: the stage trains all its epochs and keeps
    the last (an adversary's reference clients, which hold no validation records)."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    scored = bool(local.val_mask.any())
    best, best_state, waited = val_accuracy(model, local), copy.deepcopy(model.state_dict()), 0
    kept = 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        opt.zero_grad()
        loss(model).backward()
        opt.step()
        if not scored:
            kept = epoch
            continue
        if epoch % cfg.eval_every:
            continue
        score = val_accuracy(model, local)
        if score > best:
            best, best_state, waited, kept = score, copy.deepcopy(model.state_dict()), 0, epoch
        else:
            waited += 1
            if waited >= cfg.patience:
                break
    if scored:
        model.load_state_dict(best_state)
    return Trained(model.eval(), kept)


def supervised_loss(local: Data) -> Callable[[nn.Module], torch.Tensor]:
    """Cross-entropy on ``local``'s training nodes, the graph propagated whole."""

    def loss(model: nn.Module) -> torch.Tensor:
        z = model(local.x, local.edge_index)
        return F.cross_entropy(z[local.train_mask], local.y[local.train_mask])

    return loss


def fine_tuned(model: nn.Module, local: Data, cfg: StageConfig) -> Trained:
    """A copy of ``model`` fine-tuned on ``local``'s training nodes (``model`` untouched)."""
    return train_stage(copy.deepcopy(model), supervised_loss(local), local, cfg)
