"""Copy detection for generated graphs: a relabelled copy scores 1, a graph with one edge
moved or one atom changed scores below 1 but above an unrelated graph."""

import torch
from torch_geometric.data import Data

from fgl_workbench.attacks.reconstruction.graph_match import (
    COPY,
    copy_similarity,
    isomorphic,
    wl_features,
    wl_similarity,
)


def _graph(edges, labels):
    x = torch.nn.functional.one_hot(torch.tensor(labels), 3).float()
    e = torch.tensor(edges).T
    return Data(x=x, edge_index=torch.cat([e, e.flip(0)], 1))


RING = _graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)], [0, 0, 1, 0, 2])


def test_a_relabelled_copy_is_a_copy():
    perm = [3, 0, 4, 1, 2]  # node v of RING becomes node perm[v]
    edges = [(perm[a], perm[b]) for a, b in [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]]
    labels = [0] * 5
    for v, lab in enumerate([0, 0, 1, 0, 2]):
        labels[perm[v]] = lab
    copy = _graph(edges, labels)
    assert isomorphic(RING, copy)
    assert copy_similarity(RING, [copy]) == COPY


def test_near_copies_rank_between_copies_and_strangers():
    moved = _graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 1)], [0, 0, 1, 0, 2])
    atom = _graph([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)], [0, 0, 1, 0, 1])
    star = _graph([(0, 1), (0, 2), (0, 3), (0, 4)], [2, 2, 2, 2, 2])
    for near in (moved, atom):
        assert not isomorphic(RING, near)
        assert copy_similarity(RING, [star]) < copy_similarity(RING, [near]) < COPY
    # the best of several samples counts
    assert copy_similarity(RING, [star, atom]) == copy_similarity(RING, [atom])


def test_the_wl_kernel_is_normalised():
    f = wl_features(RING)
    assert abs(wl_similarity(f, f) - 1.0) < 1e-12
    assert wl_similarity(f, wl_features(_graph([(0, 1)], [1, 1]))) < 0.5
