"""Neighbour sampling on a large client: the workbench's fan-out sampler against PyG's
NeighborLoader (where pyg-lib or torch-sparse is installed) on the same CSBM graph, seeds and
fan-outs, in one run. Prints milliseconds per batch and the process's peak memory.

    OMP_NUM_THREADS=1 python benchmarks/sampling.py [--nodes 1000000] [--batches 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import torch
from torch_geometric.data import Data

from fgl_workbench.data.sampling import FanoutSampler
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.targets.minibatch import HAS_NEIGHBOR_LOADER

FANOUTS = [10, 10]
BATCH = 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    graph = csbm(CSBMParams(num_nodes=args.nodes, avg_degree=10.0)).data
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randperm(args.nodes, generator=gen)[: args.batches * BATCH].split(BATCH)

    start = time.perf_counter()
    sampler = FanoutSampler(graph.edge_index, args.nodes, FANOUTS)
    build = time.perf_counter() - start
    start = time.perf_counter()
    sizes = [sampler.sample(s, gen).nodes.numel() for s in seeds]
    ours = (time.perf_counter() - start) / len(seeds)
    print(
        f"{args.nodes:,} nodes, fan-out {FANOUTS}, {BATCH} seeds a batch, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"fan-out sampler: CSR built in {build:.2f} s, {ours * 1e3:.1f} ms a batch, "
        f"{sum(sizes) / len(sizes):,.0f} nodes a batch"
    )
    if HAS_NEIGHBOR_LOADER:
        from torch_geometric.loader import NeighborLoader

        loader = NeighborLoader(
            Data(edge_index=graph.edge_index, num_nodes=args.nodes),
            num_neighbors=FANOUTS,
            input_nodes=torch.cat(seeds),
            batch_size=BATCH,
        )
        start = time.perf_counter()
        count = sum(1 for _ in loader)
        theirs = (time.perf_counter() - start) / count
        print(f"NeighborLoader: {theirs * 1e3:.1f} ms a batch; ours / theirs {ours / theirs:.2f}")
    else:
        print("NeighborLoader: not installed (pyg-lib or torch-sparse), no ratio")
    print(f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
