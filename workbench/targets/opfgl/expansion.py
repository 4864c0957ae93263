"""O-pFGL's homophily-guided reliable node expansion (HRE, Eq. 1-2, 6-7) and the node-adaptive
distillation weights (Eq. 16-17), all from a client's own labels and structure.

Label propagation follows PyG's ``LabelPropagation`` (as the official code): Ā = D^-1/2 A D^-1/2
without self-loops, Y ← clamp(α·ĀY + (1−α)·Y⁰, 0, 1) for T steps, rows nothing reached set
to 1/C. Homophily is measured on labelled nodes over their labelled neighbours; a class's
homophily h_c is a *sum* over its labelled nodes, so it grows with the class's size too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch_geometric.nn.conv.gcn_conv import gcn_norm


class ExpansionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = Field(True, description="HRE on (homophilic graphs) or off")
    lp_iters: int = Field(2, ge=1, le=100, description="T, label-propagation steps")
    lp_alpha: float = Field(0.9, ge=0.0, le=1.0, description="α of label propagation")
    tau: float = Field(0.95, ge=0.0, le=1.0, description="τ: least soft-label confidence (C2)")
    min_degree: int = Field(0, ge=0, description="d_τ: least degree (C1; 0 = off)")
    topk: int = Field(1, ge=0, description="classes by h_c whose nodes may be added (C3)")


def label_propagation(
    edge_index: torch.Tensor,
    num_nodes: int,
    labels: torch.Tensor,
    labelled: torch.Tensor,
    num_classes: int,
    iters: int,
    alpha: float,
) -> torch.Tensor:
    """[n, C] un-normalised propagated labels, each entry in [0, 1]."""
    (src, dst), w = gcn_norm(edge_index, None, num_nodes, add_self_loops=False)
    y0 = torch.zeros(num_nodes, num_classes)
    y0[labelled, labels[labelled]] = 1.0
    y = y0.clone()
    for _ in range(iters):
        spread = torch.zeros_like(y).index_add_(0, dst, y[src] * w[:, None])
        y = (alpha * spread + (1 - alpha) * y0).clamp(0.0, 1.0)
    y[y.sum(1) == 0] = 1.0 / num_classes
    return y


def class_homophily(
    edge_index: torch.Tensor, labels: torch.Tensor, labelled: torch.Tensor, num_classes: int
) -> np.ndarray:
    """h_c = Σ_{v labelled, class c} h_v, with h_v the share of v's labelled neighbours that
    share its label (0 without labelled neighbours)."""
    src, dst = edge_index
    both = labelled[src] & labelled[dst]
    src, dst = src[both], dst[both]
    n = labels.numel()
    same = torch.zeros(n).index_add_(0, src, (labels[src] == labels[dst]).float())
    total = torch.zeros(n).index_add_(0, src, torch.ones(src.numel()))
    h = torch.where(total > 0, same / total.clamp(min=1), torch.zeros(n))
    out = torch.zeros(num_classes).index_add_(0, labels[labelled], h[labelled])
    return out.numpy(force=True).astype(np.float64)


@dataclass(frozen=True)
class Expansion:
    nodes: np.ndarray  # local ids of the reliable nodes added
    labels: np.ndarray  # their inferred labels


def reliable_nodes(
    propagated: torch.Tensor,
    degree: np.ndarray,
    candidates: np.ndarray,
    homophily: np.ndarray,
    cfg: ExpansionConfig,
) -> Expansion:
    """Eq. 6: the candidates (not labelled) with degree ≥ d_τ, soft-label confidence ≥ τ and
    an inferred class among the top-k classes by h_c."""
    if not cfg.enabled or cfg.topk == 0:
        return Expansion(np.zeros(0, np.int64), np.zeros(0, np.int64))
    p = (propagated / propagated.sum(1, keepdim=True)).numpy(force=True)
    guess, confidence = p.argmax(1), p.max(1)
    top = np.argsort(-homophily, kind="stable")[: cfg.topk]
    keep = candidates & (confidence >= cfg.tau) & np.isin(guess, top)
    if cfg.min_degree > 0:
        keep &= degree >= cfg.min_degree
    nodes = np.flatnonzero(keep)
    return Expansion(nodes, guess[nodes])


def distillation_weights(
    propagated: torch.Tensor, homophily: np.ndarray, scale: float, low: float, high: float
) -> torch.Tensor:
    """Eq. 16-17: λ_v = clip(a · Σ_c Y_vc · δ_c, λ_min, λ_max) with δ_c = 1 / (1 + ln(1 + h_c)):
    nodes that propagation places in minor classes (small h_c) lean on the teacher more."""
    delta = torch.as_tensor(1.0 / (1.0 + np.log1p(homophily))).float()
    return (scale * propagated @ delta).clamp(low, high)
