"""The fan-out sampler: real neighbours only, fan-out respected, seeds first, one batch per
generator seed; and, where torch-sparse or pyg-lib is built, the same neighbourhoods as PyG's
NeighborLoader."""

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from fgl_workbench.data.sampling import FanoutSampler
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.minibatch import HAS_NEIGHBOR_LOADER

FANOUTS = (4, 3)


@pytest.fixture(scope="module")
def graph():
    return csbm(CSBMParams(num_nodes=2000, avg_degree=8.0, seed=4)).data


def _seeds(n: int, size: int, seed: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:size]


def _sample(graph, seeds, fanouts=FANOUTS, seed=0):
    sampler = FanoutSampler(graph.edge_index, graph.num_nodes, fanouts)
    return sampler.sample(seeds, torch.Generator().manual_seed(seed))


def test_seeds_come_first_and_nodes_are_distinct(graph):
    seeds = _seeds(graph.num_nodes, 64, 1)
    batch = _sample(graph, seeds)
    assert batch.num_seeds == 64 and torch.equal(batch.nodes[:64], seeds)
    assert batch.nodes.unique().numel() == batch.nodes.numel()


def test_every_sampled_edge_is_a_real_edge(graph):
    batch = _sample(graph, _seeds(graph.num_nodes, 64, 2))
    n = graph.num_nodes
    real = (graph.edge_index[0] * n + graph.edge_index[1]).numpy()
    src, dst = batch.nodes[batch.edge_index]
    assert np.isin((src * n + dst).numpy(), real).all()
    assert batch.edge_index.unique(dim=1).shape == batch.edge_index.shape  # no edge twice


def test_each_hop_takes_min_of_degree_and_fanout_from_the_previous_hops_new_nodes(graph):
    seeds = _seeds(graph.num_nodes, 64, 3)
    batch = _sample(graph, seeds)
    degree = torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)
    per_target = torch.bincount(batch.edge_index[1], minlength=batch.nodes.numel())
    assert torch.equal(per_target[:64], degree[seeds].clamp(max=FANOUTS[0]))
    hop1 = batch.edge_index[1] < batch.num_seeds
    found = torch.unique(batch.edge_index[0, hop1])
    found = found[found >= batch.num_seeds]
    assert torch.equal(torch.unique(batch.edge_index[1, ~hop1]), found)
    assert torch.equal(per_target[found], degree[batch.nodes[found]].clamp(max=FANOUTS[1]))


def test_same_generator_seed_same_batch_and_another_seed_another(graph):
    seeds = _seeds(graph.num_nodes, 64, 4)
    a, b, c = _sample(graph, seeds), _sample(graph, seeds), _sample(graph, seeds, seed=1)
    assert torch.equal(a.nodes, b.nodes) and torch.equal(a.edge_index, b.edge_index)
    assert not torch.equal(a.edge_index, c.edge_index)


def test_a_fanout_below_one_is_refused_naming_the_field(graph):
    with pytest.raises(ConfigError, match="fanouts"):
        FanoutSampler(graph.edge_index, graph.num_nodes, [4, 0])


@pytest.mark.slow
@pytest.mark.skipif(not HAS_NEIGHBOR_LOADER, reason="NeighborLoader needs pyg-lib or torch-sparse")
def test_full_neighbourhoods_match_neighbor_loader(graph):
    """With fan-outs above the largest degree nothing is left to chance: both samplers must
    return every 2-hop edge of the seeds."""
    from torch_geometric.loader import NeighborLoader

    wide = [int(torch.bincount(graph.edge_index[1]).max()) + 1] * 2
    seeds = _seeds(graph.num_nodes, 32, 5)
    ours = _sample(graph, seeds, fanouts=wide)
    loader = NeighborLoader(
        Data(edge_index=graph.edge_index, num_nodes=graph.num_nodes),
        num_neighbors=wide,
        input_nodes=seeds,
        batch_size=seeds.numel(),
    )
    theirs = next(iter(loader))
    assert torch.equal(theirs.n_id[:32], ours.nodes[:32])
    assert set(theirs.n_id.tolist()) == set(ours.nodes.tolist())

    def edges(nodes, edge_index):
        return set(map(tuple, nodes[edge_index].T.tolist()))

    assert edges(theirs.n_id, theirs.edge_index) == edges(ours.nodes, ours.edge_index)
