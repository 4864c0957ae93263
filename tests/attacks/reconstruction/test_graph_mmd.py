"""MMD between graph sets: zero for a set against itself, small for two halves of one
dataset, large against graphs of another shape."""

import torch
from torch_geometric.data import Data

from fgl_workbench.attacks.reconstruction.graph_mmd import (
    clustering_histogram,
    clustering_mmd,
    degree_mmd,
)
from fgl_workbench.data.catalog import load_dataset


def _complete(n):
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = i != j
    return Data(x=torch.ones(n, 1), edge_index=torch.stack([i[keep], j[keep]]))


def _path(n):
    e = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
    return Data(x=torch.ones(n, 1), edge_index=torch.cat([e, e.flip(0)], 1))


def test_clustering_of_a_clique_is_one_and_of_a_path_zero():
    assert clustering_histogram(_complete(5))[-1] == 5
    assert clustering_histogram(_path(5))[0] == 5


def test_mmd_separates_shapes_not_halves(data_root):
    graphs = load_dataset("MUTAG", root=data_root).graphs
    a, b = graphs[0:60:2], graphs[1:60:2]
    paths = [_path(g.num_nodes) for g in a]
    cliques = [_complete(8) for _ in a]
    assert degree_mmd(a, a) < 1e-9 and clustering_mmd(a, a) < 1e-9
    assert degree_mmd(a, b) < 0.05 < degree_mmd(a, cliques)
    assert degree_mmd(a, b) < degree_mmd(a, paths)
    assert clustering_mmd(a, b) < 0.05 < clustering_mmd(a, cliques)
