"""Sorted int64 arrays as sets: node pairs as keys ``u * n + v`` (the edge set of a graph with
tens of millions of edges, where a Python set would take several GB), and labels. numpy 2.x's
hashed ``unique`` is many times slower than one sort."""

from __future__ import annotations

import numpy as np


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct keys in ascending order (what ``np.unique`` returns), by one in-place sort."""
    keys = np.sort(keys)
    fresh = np.empty(keys.size, dtype=bool)
    fresh[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=fresh[1:])
    return keys[fresh]


def sorted_contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in the sorted array ``sorted_keys``, by binary search."""
    if not sorted_keys.size:
        return np.zeros(keys.shape, dtype=bool)
    at = np.searchsorted(sorted_keys, keys).clip(max=sorted_keys.size - 1)
    return sorted_keys[at] == keys
