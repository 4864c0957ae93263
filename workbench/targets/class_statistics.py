"""Per-class statistics of a client's node features, the upload of statistics-based methods
(O-pFGL uploads, once, the count, mean and standard deviation of each class's propagated
features H = [X ‖ ÂX ‖ … ‖ Â^K X]); attacks read them from the transcript in this form.

Â is GCN's normalisation D^-1/2 (A + I) D^-1/2 on the client's own subgraph. A class is
uploaded only when it has at least ``min_count`` labelled nodes (O-pFGL's code: more than one,
the minimum for an unbiased standard deviation); otherwise its count, mean and std are zero,
so the receiver learns nothing of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm


@dataclass(frozen=True)
class ClassStatistics:
    counts: np.ndarray  # [C] labelled nodes of each class (0: not uploaded)
    means: np.ndarray  # [C, (K+1)·d]
    stds: np.ndarray  # [C, (K+1)·d], unbiased
    num_features: int  # d: the first d columns are the raw features' block

    def as_payload(self) -> dict[str, torch.Tensor]:
        return {
            "counts": torch.as_tensor(self.counts),
            "means": torch.as_tensor(self.means),
            "stds": torch.as_tensor(self.stds),
            "num_features": torch.tensor(self.num_features),
        }

    @classmethod
    def from_payload(cls, payload: dict[str, torch.Tensor]) -> ClassStatistics:
        return cls(
            payload["counts"].numpy(force=True),
            payload["means"].numpy(force=True),
            payload["stds"].numpy(force=True),
            int(payload["num_features"]),
        )


def propagate(x: torch.Tensor, edge_index: torch.Tensor, hops: int) -> torch.Tensor:
    """[X ‖ ÂX ‖ … ‖ Â^hops X]: parameter-free propagation, as SGC and O-pFGL compute it."""
    n = x.shape[0]
    (src, dst), w = gcn_norm(edge_index, None, n, add_self_loops=True, dtype=x.dtype)
    blocks = [x]
    for _ in range(hops):
        h = blocks[-1]
        blocks.append(torch.zeros_like(h).index_add_(0, dst, h[src] * w[:, None]))
    return torch.cat(blocks, 1)


def class_statistics(
    x: torch.Tensor,
    edge_index: torch.Tensor,
    labels: np.ndarray,
    labelled: np.ndarray,
    num_classes: int,
    hops: int = 1,
    min_count: int = 2,
) -> ClassStatistics:
    """Statistics of the ``labelled`` nodes' propagated features, one row per class."""
    h = propagate(x.double(), edge_index, hops).numpy(force=True)
    counts = np.zeros(num_classes, dtype=np.int64)
    means = np.zeros((num_classes, h.shape[1]))
    stds = np.zeros((num_classes, h.shape[1]))
    for c in range(num_classes):
        rows = h[labelled & (labels == c)]
        if rows.shape[0] < max(min_count, 1):
            continue
        counts[c] = rows.shape[0]
        means[c] = rows.mean(0)
        stds[c] = rows.std(0, ddof=1) if rows.shape[0] > 1 else 0.0
    return ClassStatistics(counts, means, stds, int(x.shape[1]))
