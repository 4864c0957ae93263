"""Scorers that read a challenge's pair list alone, with no view of any model: what a list
gives away by itself. A fair challenge leaves each of them at chance (AUC interval holding
0.5); the structure and link challenges' null tests play them."""

import numpy as np
import scipy.sparse as sp


def node_order(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Nodes numbered close together are linked (TU molecules are numbered along bonds)."""
    return -np.abs(src.astype(float) - dst)


def node_rank(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A dataset's numbering may follow degree or crawl order: small ids, linked nodes."""
    return -(src.astype(float) + dst)


def list_count(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A node's occurrences in the list stand for its degree: their product per pair."""
    ids, counts = np.unique(np.concatenate([src, dst]), return_counts=True)
    return (counts[np.searchsorted(ids, src)] * counts[np.searchsorted(ids, dst)]).astype(float)


def _list_graph(src: np.ndarray, dst: np.ndarray) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """The graph the list itself draws, as a sparse adjacency over the listed nodes, and each
    pair's rows in it."""
    ids = np.unique(np.concatenate([src, dst]))
    s, d = np.searchsorted(ids, src), np.searchsorted(ids, dst)
    a = sp.coo_matrix((np.ones(2 * s.size), (np.r_[s, d], np.r_[d, s])), shape=(ids.size,) * 2)
    a = a.tocsr()
    a.data[:] = 1  # a pair listed twice is one link
    return a, s, d


def _shared(a: sp.csr_matrix, s: np.ndarray, d: np.ndarray, weight=None) -> np.ndarray:
    rows = a[s].multiply(a[d])
    if weight is not None:
        rows = rows.multiply(weight[None, :])
    return np.asarray(rows.sum(1)).ravel()


def list_common(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Neighbours the pair's ends share in the graph the list itself draws (edges close
    triangles, so a list rich in edges shows them)."""
    return _shared(*_list_graph(src, dst))


def list_jaccard(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Shared neighbours in the list graph over the neighbours of either end."""
    a, s, d = _list_graph(src, dst)
    degree = np.asarray(a.sum(1)).ravel()
    shared = _shared(a, s, d)
    return shared / np.maximum(degree[s] + degree[d] - shared, 1)


def list_adamic_adar(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Shared list-graph neighbours, each weighted by 1 / log of its own list degree."""
    a, s, d = _list_graph(src, dst)
    degree = np.asarray(a.sum(1)).ravel()
    return _shared(a, s, d, 1 / np.log(np.maximum(degree, 2)))


def list_paths3(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Walks of length three between the pair's ends in the list graph (squares)."""
    a, s, d = _list_graph(src, dst)
    return np.asarray((a[s] @ a).multiply(a[d]).sum(1)).ravel()


def known_count(src: np.ndarray, dst: np.ndarray, known: np.ndarray) -> np.ndarray:
    """How many of the adversary's known edges ([2, K]) the pair's ends have: an edge asked
    about is never a known one, so where its ends and a non-edge's differ in how many of
    their edges could have been known, the count shows it."""
    size = int(max(src.max(), dst.max(), known.max(initial=0))) + 1
    degree = np.bincount(known.ravel(), minlength=size)
    return (degree[src] + degree[dst]).astype(float)


LEAKS = [node_order, list_count, list_common]
# and further cheap statistics of the list: the link challenge's null tests play them all
MORE_LEAKS = [node_rank, list_jaccard, list_adamic_adar, list_paths3]
