"""O-pFGL's client side after the download, the losses its two stages train on
(``fgl_workbench.targets.fine_tuning.train_stage`` runs them): stage 1 trains the shared initial
model on the surrogate graph (Eq. 13); stage 2 fine-tunes it on the client's own graph with
cross-entropy on its labelled nodes plus the node-adaptive distillation from the frozen
stage-1 teacher over all its nodes (Eq. 14-15): (1/n) Σ_v λ_v · KL(softmax(z^T_v) ‖
softmax(z^S_v)). With every λ_v = 0, stage 2 is plain fine-tuning."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.targets.fine_tuning import supervised_loss
from fgl_workbench.targets.opfgl.surrogate import SurrogateGraph


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
    if teacher_logits is None or weights is None or not bool((weights > 0).any()):
        return supervised_loss(local)
    teacher = teacher_logits.log_softmax(1)

    def loss(model: nn.Module) -> torch.Tensor:
        z = model(local.x, local.edge_index)  # one forward pass for both terms
        out = F.cross_entropy(z[local.train_mask], local.y[local.train_mask])
        kl = (teacher.exp() * (teacher - z.log_softmax(1))).sum(1)
        return out + (weights * kl).sum() / local.num_nodes

    return loss
