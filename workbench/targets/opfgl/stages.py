"""O-pFGL's client side after the download: stage 1 trains the shared initial model on the
surrogate graph (Eq. 13); stage 2 fine-tunes it on the client's own graph with cross-entropy
on its labelled nodes plus the node-adaptive distillation from the frozen stage-1 teacher over
all its nodes (Eq. 14-15): (1/n) Σ_v λ_v · KL(softmax(z^T_v) ‖ softmax(z^S_v)). With every
λ_v = 0, stage 2 is plain fine-tuning.

Both stages run full batch with Adam for up to ``epochs`` epochs, score the client's
validation nodes every ``eval_every`` epochs, stop after ``patience`` scorings without a
better one, and keep the best-scoring weights (the official code's schedule)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch_geometric.data import Data

from workbench.targets.opfgl.surrogate import SurrogateGraph


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    lr: float = Field(1e-4, gt=0.0)
    epochs: int = Field(3000, ge=0, le=100_000)
    eval_every: int = Field(100, ge=1, le=100_000)
    patience: int = Field(10, ge=1, le=10_000, description="scorings without improvement")


@torch.no_grad()
def val_accuracy(model: nn.Module, data: Data) -> float:
    model.eval()
    mask = data.val_mask
    if not bool(mask.any()):
        return 0.0
    pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[mask] == data.y[mask]).float().mean())


def train_stage(
    model: nn.Module, loss: Callable[[nn.Module], torch.Tensor], local: Data, cfg: StageConfig
) -> nn.Module:
    """``model`` trained on ``loss``, early-stopped on ``local``'s validation accuracy; the
    best weights are loaded back (the initial ones if no scoring beat them)."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    best, best_state, waited = val_accuracy(model, local), copy.deepcopy(model.state_dict()), 0
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        opt.zero_grad()
        loss(model).backward()
        opt.step()
        if epoch % cfg.eval_every:
            continue
        score = val_accuracy(model, local)
        if score > best:
            best, best_state, waited = score, copy.deepcopy(model.state_dict()), 0
        else:
            waited += 1
            if waited >= cfg.patience:
                break
    model.load_state_dict(best_state)
    return model.eval()


def surrogate_loss(graph: SurrogateGraph) -> Callable[[nn.Module], torch.Tensor]:
    """Eq. 13: cross-entropy on the surrogate graph's nodes."""

    def loss(model: nn.Module) -> torch.Tensor:
        return F.cross_entropy(model(graph.x, graph.edge_index, graph.edge_weight), graph.y)

    return loss


def fine_tuning_loss(
    local: Data, teacher_logits: torch.Tensor | None, weights: torch.Tensor | None
) -> Callable[[nn.Module], torch.Tensor]:
    """Eq. 14-15: cross-entropy on the labelled nodes plus the λ-weighted distillation over
    every node of ``local`` (none without a teacher, or with every λ_v = 0)."""
    distil = teacher_logits is not None and weights is not None and bool((weights > 0).any())
    teacher = teacher_logits.log_softmax(1) if distil else None

    def loss(model: nn.Module) -> torch.Tensor:
        z = model(local.x, local.edge_index)
        out = F.cross_entropy(z[local.train_mask], local.y[local.train_mask])
        if teacher is not None:
            kl = (teacher.exp() * (teacher - z.log_softmax(1))).sum(1)
            out = out + (weights * kl).sum() / local.num_nodes
        return out

    return loss
