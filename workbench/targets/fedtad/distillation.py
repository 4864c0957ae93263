"""FedTAD's server-side pieces (its Eqs. 6–10): a class-conditional generator of pseudo-node
features, a kNN pseudo-graph over them, and the losses of the adversarial distillation.

Paper and code disagree in four places; the paper is the default, the code a named switch:
pseudo labels ``uniform`` samples (paper) or ``balanced`` ⌊B/C⌋ per class with the rest to the
last class (code); the kNN ``similarity`` of Eq. 7 is the ``dot`` product (paper: top-K of
sigmoid(X̂X̂ᵀ), and sigmoid is monotone) or ``cosine`` (code); the diversity loss is the mean
pairwise cosine of Eq. 9 (the code's FedGen-style loss is not implemented); the ``divergence``
is ``kl`` (Eq. 10's KL(student ‖ teacher)) or ``l1`` on raw logits (code)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

Divergence = Literal["kl", "l1"]


class ConditionalGenerator(nn.Module):
    """P(z, y; θ): a label embedding concatenated with the noise, then an MLP 64 → 128 → 256
    with tanh (the official code's shape; the paper gives none) and a linear output with no
    activation."""

    def __init__(self, num_classes: int, num_features: int, noise_dim: int = 32) -> None:
        super().__init__()
        self.noise_dim = noise_dim
        self.embed = nn.Embedding(num_classes, num_classes)
        dims = [num_classes + noise_dim, 64, 128, 256]
        layers: list[nn.Module] = []
        for i, o in zip(dims[:-1], dims[1:], strict=True):
            layers += [nn.Linear(i, o), nn.Tanh()]
        self.body = nn.Sequential(*layers, nn.Linear(256, num_features))

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.body(torch.cat([self.embed(y), z], 1))


def pseudo_labels(
    count: int, num_classes: int, mode: Literal["uniform", "balanced"], generator: torch.Generator
) -> torch.Tensor:
    if mode == "uniform":
        return torch.randint(num_classes, (count,), generator=generator)
    per = count // num_classes
    labels = torch.arange(num_classes).repeat_interleave(per)
    return torch.cat([labels, torch.full((count - labels.numel(),), num_classes - 1)])


def knn_graph(
    x: torch.Tensor, k: int = 5, similarity: Literal["dot", "cosine"] = "dot"
) -> torch.Tensor:
    """Eq. 7: each pseudo-node linked to its k most similar ones (itself included when it is
    among them), made symmetric, with a self-loop on every node. Index selection is not
    differentiable: the generator learns through the features only."""
    with torch.no_grad():
        h = F.normalize(x, dim=1) if similarity == "cosine" else x
        top = (h @ h.T).topk(min(k, x.shape[0]), dim=1).indices
    n = x.shape[0]
    src = torch.arange(n).repeat_interleave(top.shape[1])
    adj = torch.zeros(n, n, dtype=torch.bool)
    adj[src, top.reshape(-1)] = True
    adj |= adj.T.clone()
    adj.fill_diagonal_(True)
    return adj.nonzero().T.contiguous()


def class_weighted(
    per_node: torch.Tensor, labels: torch.Tensor, weights: np.ndarray | torch.Tensor
) -> torch.Tensor:
    """Σ_c ω_c · mean over the pseudo-nodes of class c of ``per_node`` (classes without
    pseudo-nodes contribute nothing)."""
    w = torch.as_tensor(weights, dtype=per_node.dtype)
    total = per_node.new_zeros(())
    for c in labels.unique().tolist():
        total = total + w[c] * per_node[labels == c].mean()
    return total


def semantic_loss(
    teacher_logits: list[torch.Tensor], labels: torch.Tensor, weights: np.ndarray
) -> torch.Tensor:
    """Eq. 8: the reliable teachers should classify each pseudo-node as its label (CE on
    logits: the paper's "softmax then CE" would apply softmax twice). ``weights``: ω [K, C]."""
    ce = [F.cross_entropy(t, labels, reduction="none") for t in teacher_logits]
    return sum(class_weighted(c, labels, w) for c, w in zip(ce, weights, strict=True))


def diversity_loss(x: torch.Tensor) -> torch.Tensor:
    """Eq. 9: the mean pairwise cosine similarity of the pseudo-nodes (minimised)."""
    unit = F.normalize(x, dim=1)
    return (unit @ unit.T).mean()


def divergence_loss(
    student_logits: torch.Tensor,
    teacher_logits: list[torch.Tensor],
    labels: torch.Tensor,
    weights: np.ndarray,
    kind: Divergence = "kl",
) -> torch.Tensor:
    """Eq. 10: how far the student is from each teacher on the pseudo-graph, weighted by the
    teacher's reliability for each node's class. ``kl``: KL(student ‖ teacher) as the paper
    writes it; ``l1``: mean absolute difference of raw logits (code). Teachers are detached."""
    total = student_logits.new_zeros(())
    log_s = F.log_softmax(student_logits, 1)
    for t, w in zip(teacher_logits, weights, strict=True):
        t = t.detach()
        if kind == "kl":
            per_node = (log_s.exp() * (log_s - F.log_softmax(t, 1))).sum(1)
        else:
            per_node = (student_logits - t).abs().mean(1)
        total = total + class_weighted(per_node, labels, w)
    return total
