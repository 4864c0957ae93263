"""Is a generated graph one of the training graphs? Weisfeiler-Lehman subtree features give a
similarity in [0, 1] (the normalised WL kernel of Shervashidze et al. 2011); equal WL
features are confirmed by an exact isomorphism test, so only true copies score 1.

Node labels are the argmax of the one-hot node features (atom types for molecules; a graph
without features is unlabelled), so a copy must also put the right atoms in the right
places."""

from __future__ import annotations

import hashlib
from collections import Counter

import networkx as nx
import numpy as np
from torch_geometric.data import Data

COPY = 1.0  # the similarity of an isomorphic copy; anything else scores below it
NEAR_COPY = 1.0 - 1e-6


def node_labels(g: Data) -> list[int]:
    if g.x is None or g.x.shape[1] == 0:
        return [0] * g.num_nodes
    return g.x.argmax(1).tolist()


def edge_list(g: Data) -> list[tuple[int, int]]:
    src, dst = g.edge_index.tolist()
    return sorted({(min(a, b), max(a, b)) for a, b in zip(src, dst, strict=True) if a != b})


def wl_features(g: Data, iterations: int = 3) -> Counter:
    """Counts of WL labels over ``iterations`` rounds of neighbourhood relabelling."""
    labels = [str(v) for v in node_labels(g)]
    neighbours: list[list[int]] = [[] for _ in range(g.num_nodes)]
    for a, b in edge_list(g):
        neighbours[a].append(b)
        neighbours[b].append(a)
    counts = Counter(f"0:{lab}" for lab in labels)
    for it in range(1, iterations + 1):
        labels = [
            hashlib.blake2b(
                (labels[v] + "|" + ",".join(sorted(labels[u] for u in neighbours[v]))).encode(),
                digest_size=8,
            ).hexdigest()
            for v in range(g.num_nodes)
        ]
        counts.update(f"{it}:{lab}" for lab in labels)
    return counts


def wl_similarity(a: Counter, b: Counter) -> float:
    """The normalised WL subtree kernel ⟨a, b⟩ / (‖a‖‖b‖)."""
    dot = sum(v * b[k] for k, v in a.items() if k in b)
    na = np.sqrt(sum(v * v for v in a.values()))
    nb = np.sqrt(sum(v * v for v in b.values()))
    return float(dot / (na * nb)) if na and nb else 0.0


def to_networkx(g: Data) -> nx.Graph:
    out = nx.Graph()
    out.add_nodes_from((v, {"label": lab}) for v, lab in enumerate(node_labels(g)))
    out.add_edges_from(edge_list(g))
    return out


def isomorphic(a: Data, b: Data) -> bool:
    """Labelled isomorphism (node labels must match)."""
    if a.num_nodes != b.num_nodes or len(edge_list(a)) != len(edge_list(b)):
        return False
    return nx.is_isomorphic(
        to_networkx(a), to_networkx(b), node_match=lambda x, y: x["label"] == y["label"]
    )


def copy_similarity(target: Data, generated: list[Data], iterations: int = 3) -> float:
    """The best match of ``target`` among ``generated``: ``COPY`` for an isomorphic copy, else
    the highest WL similarity (capped just below a copy)."""
    want = wl_features(target, iterations)
    best = 0.0
    for g in generated:
        sim = wl_similarity(want, wl_features(g, iterations))
        if sim >= NEAR_COPY and isomorphic(target, g):
            return COPY
        best = max(best, min(sim, NEAR_COPY))
    return best
