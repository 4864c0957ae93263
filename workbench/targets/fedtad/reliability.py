"""FedTAD's class-wise knowledge reliability (its Eqs. 3–5), computed once by each client and
uploaded: how many labelled nodes of each class the client has, weighted by how alike each one
is to its neighbours in a topology-aware embedding.

- Topology embedding (Eq. 3): h_i^TOPO = [P^1_ii, …, P^p_ii], the probabilities that a k-step
  random walk from i returns to i, P = D⁻¹A with self-loops (the official code's convention;
  without them P^1_ii is 0 for every node). The official code's element-wise ``A * pinv(D)``
  and walks over node ids are not implemented: they make the embedding random node indices.
- Hybrid embedding (Eq. 4): h_i^HYB = x_i ‖ h_i^TOPO.
- Reliability (Eq. 5, whose outer sum the paper's text lost; reconstructed in
  ../shared/methods/fedtad.md): φ_k^c = Σ_{labelled i of class c} r_i, with ``variant: paper``
  r_i = mean cosine of h_i^HYB to its neighbours' (an isolated node contributes 0) and
  ``variant: code`` r_i = (1 + Σ_j cos) / (|N(i)| + 1) (the node counts itself once, so an
  isolated node contributes 1).
- Server weights: ω_k^c = φ_k^c / Σ_k' φ_k'^c, 0 for a class nobody holds."""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch_geometric.utils import remove_self_loops

Variant = Literal["paper", "code"]


def return_probabilities(edge_index: torch.Tensor, num_nodes: int, steps: int = 5) -> np.ndarray:
    """[n, steps]: column k − 1 holds diag(P^k), P = D⁻¹(A + I) (sparse powers, no n × n
    dense matrix)."""
    src, dst = remove_self_loops(edge_index)[0].numpy(force=True)
    loops = np.arange(num_nodes)
    adj = sp.csr_matrix(
        (
            np.ones(src.size + num_nodes),
            (np.concatenate([src, loops]), np.concatenate([dst, loops])),
        ),
        shape=(num_nodes, num_nodes),
    )
    adj.data[:] = 1.0  # duplicate edges count once
    walk = sp.diags(1.0 / np.asarray(adj.sum(1)).ravel()) @ adj
    power = walk
    out = np.empty((num_nodes, steps))
    for k in range(steps):
        out[:, k] = power.diagonal()
        power = power @ walk
    return out


def hybrid_embedding(x: torch.Tensor, edge_index: torch.Tensor, steps: int = 5) -> np.ndarray:
    """x_i ‖ h_i^TOPO for every node."""
    topo = return_probabilities(edge_index, x.shape[0], steps)
    return np.hstack([x.double().numpy(force=True), topo])


def node_reliability(h: np.ndarray, edge_index: torch.Tensor, variant: Variant) -> np.ndarray:
    """r_i for every node: its (mean) cosine similarity to its 1-hop neighbours."""
    src, dst = remove_self_loops(edge_index)[0].numpy(force=True)
    norms = np.linalg.norm(h, axis=1)
    unit = h / np.where(norms > 0, norms, 1.0)[:, None]
    cos = (unit[src] * unit[dst]).sum(1)
    n = h.shape[0]
    total = np.bincount(src, weights=cos, minlength=n)
    degree = np.bincount(src, minlength=n)
    if variant == "code":
        return (1.0 + total) / (degree + 1.0)
    return np.where(degree > 0, total / np.maximum(degree, 1), 0.0)


def class_reliability(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    labels: np.ndarray,
    labelled: np.ndarray,
    num_classes: int,
    steps: int = 5,
    variant: Variant = "paper",
) -> np.ndarray:
    """φ_k ∈ R^C: the sum of r_i over the client's labelled nodes of each class (unnormalised:
    its size grows with the number of labelled nodes, which the server's weights use)."""
    r = node_reliability(hybrid_embedding(x, edge_index, steps), edge_index, variant)
    return np.bincount(labels[labelled], weights=r[labelled], minlength=num_classes)


def reliability_weights(phi: np.ndarray) -> np.ndarray:
    """ω [clients, C]: each class's reliabilities normalised over clients; a class no client
    holds gets weight 0 everywhere (not NaN). A noised upload (gaussian-upload) can be
    negative: it counts as 0 (post-processing; exact reliabilities are never negative)."""
    phi = np.clip(phi, 0.0, None)
    total = phi.sum(0, keepdims=True)
    return np.where(total != 0, phi / np.where(total != 0, total, 1.0), 0.0)
