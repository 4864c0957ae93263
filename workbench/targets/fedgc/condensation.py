"""FedGC's condensation pieces (its Eqs. 3 and 16, App. E): the condensed labels fixed from
the uploaded class counts, the edge generator that makes A' from X', the 2-layer GCN whose
randomly drawn weights both sides differentiate, the per-class gradients a client uploads, the
server's aggregation of them and the matching distance.

The GCN is written as plain tensor algebra on a (sparse or dense) normalised adjacency so that
one set of weights θ serves a client's sparse subgraph and the dense condensed graph alike, and
the condensed side can be differentiated through its gradient (``create_graph``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn.conv.gcn_conv import gcn_norm

Params = list[torch.Tensor]  # [W1, b1, W2, b2]
Weighting = Literal["counts", "mean"]
Distance = Literal["sse", "cosine"]


def condensed_labels(train_counts: np.ndarray, ratio: float) -> np.ndarray:
    """Y' from the federation's training-label counts (GCOND's convention, the code's
    ``generate_labels_syn``): each class but the largest gets max(⌊n_c·r⌋, 1) nodes, the
    largest the rest of ⌊n·r⌋. Classes nobody labels get none. Sorted by class."""
    counts = np.asarray(train_counts, dtype=np.int64)
    present = np.flatnonzero(counts > 0)
    if present.size == 0:
        raise ValueError("condensed_labels: no class has a training node")
    largest = present[np.argmax(counts[present])]
    sizes = np.zeros_like(counts)
    for c in present:
        if c != largest:
            sizes[c] = max(int(counts[c] * ratio), 1)
    sizes[largest] = max(int(counts.sum() * ratio) - sizes.sum(), 1)
    return np.repeat(np.arange(counts.size), sizes)


class EdgeGenerator(nn.Module):
    """A'_ij = σ((MLP([x_i‖x_j]) + MLP([x_j‖x_i])) / 2), zero diagonal (Eq. 16; GCOND's PGE).
    BatchNorm stays in training mode, as in the code: the pairs are one batch. The first layer
    on [x_i‖x_j] is x_i W_a + x_j W_b, computed per node and broadcast over pairs: n·d·h work
    instead of n²·d·h."""

    def __init__(self, num_features: int, hidden: int = 128, symmetric: bool = True) -> None:
        super().__init__()
        self.symmetric = symmetric
        self.first = nn.Linear(2 * num_features, hidden)
        self.rest = nn.Sequential(
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        w = self.first.weight
        pairs = (x @ w[:, :d].T)[:, None] + (x @ w[:, d:].T)[None] + self.first.bias
        score = self.rest(pairs.reshape(n * n, -1)).view(n, n)
        if self.symmetric:
            score = (score + score.T) / 2
        return torch.sigmoid(score) * (1 - torch.eye(n))


def normalised_dense(adj: torch.Tensor) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 of a dense weighted adjacency (differentiable)."""
    a = adj + torch.eye(adj.shape[0])
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


def normalised_sparse(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 of an unweighted graph, as a sparse matrix (PyG's GCN norm)."""
    ei, w = gcn_norm(edge_index, num_nodes=num_nodes, add_self_loops=True)
    return torch.sparse_coo_tensor(ei.flip(0), w, (num_nodes,) * 2, check_invariants=False)


def random_gcn(
    num_features: int, hidden: int, num_classes: int, generator: torch.Generator
) -> Params:
    """Fresh θ, each weight and bias uniform in ±1/√fan_in (the code's initialisation)."""
    out = []
    for i, o in ((num_features, hidden), (hidden, num_classes)):
        bound = 1.0 / np.sqrt(i)
        out.append((torch.rand(i, o, generator=generator) * 2 - 1) * bound)
        out.append((torch.rand(o, generator=generator) * 2 - 1) * bound)
    return out


@dataclass(frozen=True)
class ReceptiveField:
    """What a 2-layer GCN's loss on some labelled nodes depends on: the aggregated features
    Â X of the nodes within one hop of them (whose hidden states reach them) and the rows of
    Â that carry those states to them. A client builds it once; a round's gradients then cost
    O(|field|·d·h) instead of O(|graph|·d·h) (the code samples such neighbourhoods instead)."""

    ax: torch.Tensor  # [n1, d]: (Â X) rows of the labelled nodes' 1-hop neighbourhood
    adj: torch.Tensor  # [t, n1]: Â rows of the labelled nodes, restricted to it
    y: torch.Tensor  # [t]: the labelled nodes' labels


def receptive_field(
    x: torch.Tensor, adj: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
) -> ReceptiveField:
    """The field of the ``mask`` nodes, from a sparse or dense normalised Â (differentiable
    in ``x`` and a dense ``adj``: the condensed side builds it every step)."""
    rows = (adj.to_dense() if adj.is_sparse else adj)[mask]
    near = torch.nonzero(rows.detach().abs().sum(0)).squeeze(1)
    return ReceptiveField((adj @ x)[near], rows[:, near], y[mask])


def class_gradients(
    params: Params, field: ReceptiveField, create_graph: bool = False
) -> dict[int, Params]:
    """∇_θ of the mean cross-entropy over the field's labelled nodes of each class, each
    with its full 2-hop neighbourhood (one forward pass serves all classes)."""
    theta = [p if p.requires_grad else p.detach().requires_grad_(True) for p in params]
    w1, b1, w2, b2 = theta
    hidden = torch.relu(field.ax @ w1 + b1)
    logits = field.adj @ (hidden @ w2) + b2
    out = {}
    for c in field.y.unique().tolist():
        nodes = field.y == c
        loss = F.cross_entropy(logits[nodes], field.y[nodes])
        grads = torch.autograd.grad(loss, theta, retain_graph=True, create_graph=create_graph)
        out[int(c)] = list(grads)
    return out


def aggregate_class_gradients(
    uploads: Sequence[dict[int, Params]], counts: np.ndarray, weighting: Weighting = "counts"
) -> dict[int, Params]:
    """g_c = Σ_j w_jc g_jc over the clients that uploaded class c: ``counts`` weighs them by
    n_j(c)/n(c) (the paper), ``mean`` equally (the code's default). ``counts``: [clients, C]."""
    out = {}
    for c in sorted({c for u in uploads for c in u}):
        holders = [j for j, u in enumerate(uploads) if c in u]
        w = counts[holders, c].astype(float) if weighting == "counts" else np.ones(len(holders))
        w = w / w.sum()
        out[c] = [
            sum(float(wj) * uploads[j][c][p] for wj, j in zip(w, holders, strict=True))
            for p in range(len(uploads[holders[0]][c]))
        ]
    return out


def gradient_distance(
    synthetic: Params, real: Params, metric: Distance = "sse", eps: float = 1e-6
) -> torch.Tensor:
    """D of App. E: ``sse``, the sum of squared differences over every parameter (the small
    datasets), or ``cosine``, GCOND's Σ over weight columns of 1 − cos (biases add nothing)."""
    total = synthetic[0].new_zeros(())
    for s, r in zip(synthetic, real, strict=True):
        if metric == "sse":
            total = total + ((s - r) ** 2).sum()
        elif s.dim() > 1:
            cos = (s * r).sum(0) / (s.norm(dim=0) * r.norm(dim=0) + eps)
            total = total + (1 - cos).sum()
    return total


def class_coefficients(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """n'_c / max_c n'_c: each class's matching term scaled by its condensed size (GCOND)."""
    sizes = np.bincount(labels, minlength=num_classes).astype(float)
    return sizes / sizes.max()
