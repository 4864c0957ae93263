"""Embedded datasets that need no download, generated deterministically from a seed.

The contextual stochastic block model (CSBM) is the standard synthetic benchmark for node
classification: labels drive both edges (homophily ``h`` = expected fraction of same-class
edges) and Gaussian features around class means (``signal`` = distance of means / noise)."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from fgl_workbench.data.datasets import GraphDataset, NodeDataset, graph_data
from fgl_workbench.data.pair_keys import sorted_unique

MAX_NODES = 100_000_000  # keys u * n + v of node pairs stay far inside int64
FEATURE_BLOCK = 1 << 24  # feature values drawn at once: 128 MiB of float64


class CSBMParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    num_nodes: int = Field(1000, ge=10, le=MAX_NODES)
    num_classes: int = Field(4, ge=2, le=100)
    num_features: int = Field(32, ge=1, le=10_000)
    homophily: float = Field(0.8, ge=0.0, le=1.0)
    avg_degree: float = Field(6.0, gt=0.0, le=1000.0)
    signal: float = Field(0.5, ge=0.0, description="class-mean separation in noise units")
    seed: int = 0


def csbm(params: CSBMParams) -> NodeDataset:
    """Vectorised throughout; features are written into one float32 array a block of rows at
    a time, so ten million nodes never hold the float64 features whole."""
    rng = np.random.default_rng(params.seed)
    n, c = params.num_nodes, params.num_classes
    y = rng.permutation(np.arange(n) % c)
    means = rng.standard_normal((c, params.num_features))
    means *= params.signal / np.linalg.norm(means, axis=1, keepdims=True).clip(1e-12)
    x = _features(rng, means, y)

    m = int(round(n * params.avg_degree / 2))
    src = rng.integers(0, n, size=m)
    same = rng.random(m) < params.homophily
    dst_class = np.where(same, y[src], (y[src] + rng.integers(1, c, size=m)) % c)
    del same
    sizes = np.bincount(y, minlength=c)
    pick = (rng.random(m) * sizes[dst_class]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    by_class = np.argsort(y, kind="stable")  # each class's nodes in id order, class by class
    dst = by_class[offsets[dst_class] + pick]
    del dst_class, pick
    key = _pair_keys(src, dst, n)
    del src, dst
    data = Data(x=torch.from_numpy(x), edge_index=_undirected(key, n), y=torch.as_tensor(y))
    return NodeDataset(name="csbm", data=data, num_classes=c)


def _features(rng: np.random.Generator, means: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Class mean plus N(0, 1/F) noise per node, drawn block by block (the same stream as one
    draw of the whole matrix) and rounded to float32 as each block is done."""
    n, f = y.size, means.shape[1]
    x = np.empty((n, f), dtype=np.float32)
    rows = max(1, FEATURE_BLOCK // f)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        x[start:stop] = means[y[start:stop]] + rng.standard_normal((stop - start, f)) / np.sqrt(f)
    return x


def _pair_keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """The distinct non-loop pairs as sorted keys ``min * n + max``."""
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    keep = lo != hi
    return sorted_unique(lo[keep] * n + hi[keep])


def _undirected(key: np.ndarray, n: int) -> torch.Tensor:
    """Both directions of every pair, sorted by (row, col): what PyG's ``remove_self_loops``,
    ``coalesce`` and ``to_undirected`` give, built from one int64 key per pair instead of
    several [2, E] copies."""
    both = np.concatenate([key, key % n * n + key // n])
    both.sort()
    edge_index = np.empty((2, both.size), dtype=np.int64)
    np.floor_divide(both, n, out=edge_index[0])
    np.remainder(both, n, out=edge_index[1])
    return torch.from_numpy(edge_index)


class SyntheticGraphsParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    num_graphs: int = Field(300, ge=10, le=1_000_000)
    num_classes: int = Field(2, ge=2, le=20)
    num_features: int = Field(8, ge=1, le=1000)
    min_nodes: int = Field(10, ge=2)
    max_nodes: int = Field(30, ge=2)
    signal: float = Field(0.15, ge=0.0, description="class-dependent feature shift")
    label_noise: float = Field(
        0.0, ge=0.0, lt=1.0, description="share of graphs labelled with another class"
    )
    seed: int = 0


def synthetic_graphs(params: SyntheticGraphsParams) -> GraphDataset:
    """Class ``k`` graphs are Erdős–Rényi with edge density rising with ``k`` plus a
    class-dependent feature shift, so both structure and features carry the label. With
    ``label_noise``, that share of the graphs (drawn after the others, so the rest stay as
    they are) is labelled with a uniformly drawn other class: atypical records a model can
    only fit by memorising them, the ones membership attacks find first."""
    if params.max_nodes < params.min_nodes:
        raise ValueError("max_nodes must be >= min_nodes")
    rng = np.random.default_rng(params.seed)
    c = params.num_classes
    shifts = rng.standard_normal((c, params.num_features)) * params.signal
    graphs = []
    labels = rng.permutation(np.arange(params.num_graphs) % c)
    for label in labels:
        n = int(rng.integers(params.min_nodes, params.max_nodes + 1))
        density = 0.15 + 0.05 * label / (c - 1)
        upper = np.triu(rng.random((n, n)) < density, k=1)
        src, dst = np.nonzero(upper)
        edge_index = to_undirected(torch.as_tensor(np.stack([src, dst])), num_nodes=n)
        x = rng.standard_normal((n, params.num_features)) + shifts[label]
        graphs.append(graph_data(torch.as_tensor(x), edge_index, int(label)))
    if params.label_noise > 0:
        flip = np.random.default_rng([params.seed, 1]).random(len(graphs)) < params.label_noise
        other = np.random.default_rng([params.seed, 2]).integers(1, c, size=len(graphs))
        for i in np.flatnonzero(flip):
            graphs[i].y = torch.tensor([(int(labels[i]) + int(other[i])) % c])
    return GraphDataset(name="synthetic-graphs", graphs=graphs, num_classes=c)
