"""Scorers that read a challenge's pair list alone, with no view of any model: what a list
gives away by itself. A fair challenge leaves each of them at chance (AUC interval holding
0.5); the structure and link challenges' null tests play them."""

import numpy as np


def node_order(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Nodes numbered close together are linked (TU molecules are numbered along bonds)."""
    return -np.abs(src.astype(float) - dst)


def list_count(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A node's occurrences in the list stand for its degree: their product per pair."""
    ids, counts = np.unique(np.concatenate([src, dst]), return_counts=True)
    return (counts[np.searchsorted(ids, src)] * counts[np.searchsorted(ids, dst)]).astype(float)


def list_common(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Neighbours the pair's ends share in the graph the list itself draws (edges close
    triangles, so a list rich in edges shows them)."""
    ids = np.unique(np.concatenate([src, dst]))
    s, d = np.searchsorted(ids, src), np.searchsorted(ids, dst)
    a = np.zeros((ids.size, ids.size), dtype=np.int64)
    a[s, d] = a[d, s] = 1
    return ((a[s] * a[d]).sum(1)).astype(float)


LEAKS = [node_order, list_count, list_common]
