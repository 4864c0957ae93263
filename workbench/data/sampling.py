"""Neighbour sampling for clients whose graph does not fit full-batch training: PyG's
``NeighborLoader`` needs pyg-lib or torch-sparse (neither is on the package index; see the
``sampling`` extra in the README), so this is a small fan-out sampler over the client's CSR
with the same semantics: each hop draws up to ``fanout`` distinct neighbours of the nodes the
previous hop discovered, and the batch is the sampled edges, not the induced subgraph."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fgl_workbench.errors import ConfigError


@dataclass(frozen=True)
class SampledBatch:
    """``nodes``: the client-local ids of the batch, its seeds first, in seed order;
    ``edge_index``: sampled edges (neighbour → sampled node) as positions in ``nodes``."""

    nodes: torch.Tensor
    edge_index: torch.Tensor
    num_seeds: int


class FanoutSampler:
    """Samples, for a batch of seed nodes, ``fanouts[h]`` neighbours per node at hop ``h``
    without replacement (all of them where a node has fewer), vectorised over each hop.
    Row ``v`` of the CSR holds the sources of the edges into ``v`` (PyG's message flow)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int, fanouts: Sequence[int]) -> None:
        if not fanouts or any(f < 1 for f in fanouts):
            raise ConfigError(f"fanouts: each hop needs at least one neighbour, got {fanouts}")
        src, dst = edge_index.cpu()
        order = torch.sort(dst, stable=True).indices
        self.col = src[order]
        self.rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        self.rowptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0)
        self.fanouts = tuple(fanouts)
        self.num_nodes = num_nodes

    def sample(self, seeds: torch.Tensor, generator: torch.Generator) -> SampledBatch:
        """The batch grown from ``seeds`` (distinct client-local ids); the same generator
        state gives the same batch."""
        seeds = seeds.cpu()
        local = torch.full((self.num_nodes,), -1, dtype=torch.long)
        local[seeds] = torch.arange(seeds.numel())
        nodes, frontier, edges = [seeds], seeds, []
        count = seeds.numel()
        for fanout in self.fanouts:
            neighbour, target = self._hop(frontier, fanout, generator)
            fresh = torch.unique(neighbour[local[neighbour] < 0])
            local[fresh] = torch.arange(count, count + fresh.numel())
            count += fresh.numel()
            nodes.append(fresh)
            edges.append(torch.stack([local[neighbour], local[target]]))
            frontier = fresh
        return SampledBatch(torch.cat(nodes), torch.cat(edges, dim=1), seeds.numel())

    def _hop(
        self, frontier: torch.Tensor, fanout: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Up to ``fanout`` distinct in-neighbours of each frontier node: every incoming edge
        gets a uniform random rank inside its node's segment and the lowest ranks are kept."""
        start = self.rowptr[frontier]
        degree = self.rowptr[frontier + 1] - start
        segment = torch.repeat_interleave(torch.arange(frontier.numel()), degree)
        first = torch.cumsum(degree, 0) - degree
        position = start[segment] + torch.arange(segment.numel()) - first[segment]
        noise = torch.rand(segment.numel(), generator=generator, device=generator.device).cpu()
        shuffled = torch.argsort(noise)
        order = shuffled[torch.sort(segment[shuffled], stable=True).indices]  # random per node
        rank = torch.arange(segment.numel()) - first[segment[order]]
        keep = order[rank < fanout]
        return self.col[position[keep]], frontier[segment[keep]]
