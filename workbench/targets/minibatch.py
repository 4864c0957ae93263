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
from fgl_workbench.models.sparse import built_for
from fgl_workbench.targets.training import noted

HAS_NEIGHBOR_LOADER = WITH_PYG_LIB or WITH_TORCH_SPARSE


class NeighbourBatches:
    """Batches of a client's training nodes with their sampled neighbourhoods, seeds first:
    from ``NeighborLoader`` where it runs, from ``FanoutSampler`` otherwise. The CSR (or the
    loader's graph) is built once, not per epoch."""

    def __init__(self, data: Data, fanouts: Sequence[int], batch_size: int) -> None:
        self.seeds = data.train_mask.nonzero().view(-1).cpu()
        self.fanouts, self.batch_size = list(fanouts), batch_size
        self.graph = Data(edge_index=data.edge_index.cpu(), num_nodes=data.num_nodes)
        self.sampler = (
            None if HAS_NEIGHBOR_LOADER else FanoutSampler(data.edge_index, data.num_nodes, fanouts)
        )

    def epoch(self, generator: torch.Generator) -> Iterator[SampledBatch]:
        """One pass over the training nodes in an order drawn from ``generator`` (which also
        draws the fan-out sampler's neighbours; NeighborLoader's come from torch's seed). Batches
        are built on the CPU whatever the generator's device."""
        order = torch.randperm(self.seeds.numel(), generator=generator, device=generator.device)
        seeds = self.seeds[order.cpu()]
        if self.sampler is not None:
            for batch in seeds.split(self.batch_size):
                yield self.sampler.sample(batch, generator)
            return
        from torch_geometric.loader import NeighborLoader

        loader = NeighborLoader(
            self.graph, num_neighbors=self.fanouts, input_nodes=seeds, batch_size=self.batch_size
        )
        for b in loader:
            yield SampledBatch(b.n_id, b.edge_index, b.batch_size)


def neighbour_batches(data: Data, fanouts: Sequence[int], batch_size: int) -> NeighbourBatches:
    """The client's ``NeighbourBatches``, built on its first use only (the CSR in the first
    round, not every round); it goes with the client's graph."""
    return built_for(
        data.edge_index,
        ("batches", tuple(fanouts), batch_size),
        lambda: NeighbourBatches(data, fanouts, batch_size),
    )


def train_node_minibatch_epochs(
    model: nn.Module,
    data: Data,
    opt: torch.optim.Optimizer,
    epochs: int,
    batches: NeighbourBatches,
    generator: torch.Generator,
) -> None:
    """Cross-entropy on the client's training nodes, one batch of seeds per step, each
    seed's sampled neighbourhood as its graph. Batches are sampled on the CPU and moved to
    the data's device."""
    model.train()
    device = data.x.device
    for _ in range(epochs):
        for b in batches.epoch(generator):
            nodes = b.nodes.to(device)
            opt.zero_grad()
            out = model(data.x[nodes], b.edge_index.to(device))[: b.num_seeds]
            noted(F.cross_entropy(out, data.y[nodes[: b.num_seeds]])).backward()
            opt.step()
