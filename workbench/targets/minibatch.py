"""Mini-batch local training with neighbour sampling, for a client whose graph does not fit
full-batch training: the same cross-entropy on its training nodes as ``train_node_epochs``,
one sampled batch of seeds at a time. PyG's ``NeighborLoader`` is used where pyg-lib or
torch-sparse is installed, the workbench's ``FanoutSampler`` otherwise."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE

from fgl_workbench.data.sampling import FanoutSampler, SampledBatch

HAS_NEIGHBOR_LOADER = WITH_PYG_LIB or WITH_TORCH_SPARSE


def sampled_batches(
    data: Data, fanouts: Sequence[int], batch_size: int, generator: torch.Generator
) -> Iterator[SampledBatch]:
    """One epoch of batches over the training nodes in a random order, as sampled subgraphs
    with their seeds first: from ``NeighborLoader`` where it runs, from ``FanoutSampler``
    otherwise."""
    seeds = data.train_mask.nonzero().view(-1).cpu()
    seeds = seeds[torch.randperm(seeds.numel(), generator=generator)]
    if HAS_NEIGHBOR_LOADER:
        from torch_geometric.loader import NeighborLoader

        loader = NeighborLoader(
            Data(edge_index=data.edge_index.cpu(), num_nodes=data.num_nodes),
            num_neighbors=list(fanouts),
            input_nodes=seeds,
            batch_size=batch_size,
        )
        for b in loader:
            yield SampledBatch(b.n_id, b.edge_index, b.batch_size)
        return
    sampler = FanoutSampler(data.edge_index, data.num_nodes, fanouts)
    for batch in seeds.split(batch_size):
        yield sampler.sample(batch, generator)


def train_node_minibatch_epochs(
    model: nn.Module,
    data: Data,
    opt: torch.optim.Optimizer,
    epochs: int,
    fanouts: Sequence[int],
    batch_size: int,
    generator: torch.Generator,
) -> None:
    """Cross-entropy on the client's training nodes, ``batch_size`` seeds per step, each
    seed's ``len(fanouts)``-hop sampled neighbourhood as its graph. Batches are sampled on
    the CPU and moved to the data's device."""
    model.train()
    device = data.x.device
    for _ in range(epochs):
        for b in sampled_batches(data, fanouts, batch_size, generator):
            nodes = b.nodes.to(device)
            opt.zero_grad()
            out = model(data.x[nodes], b.edge_index.to(device))[: b.num_seeds]
            F.cross_entropy(out, data.y[nodes[: b.num_seeds]]).backward()
            opt.step()
