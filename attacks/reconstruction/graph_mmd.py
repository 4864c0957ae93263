"""How far one set of graphs is from another: maximum mean discrepancy (MMD²) between the
sets' degree and clustering-coefficient histograms, the generator-quality measure of
GraphRNN, EDP-GNN and CeFGC's Table 8.

Each graph becomes a normalised histogram; two histograms are compared by a Gaussian kernel
on their total-variation distance, k(p, q) = exp(−TV(p, q)² / 2s²) (GDSS's choice: unlike the
earth mover's kernel it needs no solver, and it is positive definite). MMD² is the biased
estimate mean k(X, X) + mean k(Y, Y) − 2 mean k(X, Y), zero when the sets' histograms agree.
Orbit counts (Table 8's third column) need the ORCA tool and are left out."""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_dense_adj

CLUSTERING_BINS = 100


def dense_adjacency(g: Data) -> torch.Tensor:
    """Binary symmetric [n, n] adjacency without self-loops."""
    n = g.num_nodes
    if not g.edge_index.numel():
        return torch.zeros(n, n)
    a = to_dense_adj(g.edge_index, max_num_nodes=n)[0].clamp(max=1)
    a = ((a + a.T) > 0).float()
    return a.fill_diagonal_(0)


def degree_histogram(g: Data, bins: int) -> torch.Tensor:
    deg = dense_adjacency(g).sum(1).long().clamp(max=bins - 1)
    return torch.bincount(deg, minlength=bins).float()


def clustering_histogram(g: Data, bins: int = CLUSTERING_BINS) -> torch.Tensor:
    """Histogram over [0, 1] of the nodes' local clustering coefficients."""
    a = dense_adjacency(g)
    deg = a.sum(1)
    triangles = (a @ a * a).sum(1) / 2
    pairs = deg * (deg - 1) / 2
    coef = torch.where(pairs > 0, triangles / pairs.clamp(min=1), torch.zeros_like(pairs))
    return torch.histc(coef, bins=bins, min=0.0, max=1.0)


def gaussian_tv_mmd(x: torch.Tensor, y: torch.Tensor, bandwidth: float) -> float:
    """MMD² between histogram sets ``x`` [m, B] and ``y`` [n, B] (rows normalised here)."""
    x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
    y = y / y.sum(1, keepdim=True).clamp(min=1e-12)

    def kernel(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        tv = 0.5 * torch.cdist(p, q, p=1)
        return torch.exp(-(tv**2) / (2 * bandwidth**2))

    return float(kernel(x, x).mean() + kernel(y, y).mean() - 2 * kernel(x, y).mean())


def degree_mmd(a: list[Data], b: list[Data], bandwidth: float = 1.0) -> float:
    bins = 1 + max(int(dense_adjacency(g).sum(1).max()) for g in a + b)
    return gaussian_tv_mmd(
        torch.stack([degree_histogram(g, bins) for g in a]),
        torch.stack([degree_histogram(g, bins) for g in b]),
        bandwidth,
    )


def clustering_mmd(a: list[Data], b: list[Data], bandwidth: float = 0.1) -> float:
    return gaussian_tv_mmd(
        torch.stack([clustering_histogram(g) for g in a]),
        torch.stack([clustering_histogram(g) for g in b]),
        bandwidth,
    )
