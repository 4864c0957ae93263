"""Where a GPU pays: FedAvg on Cora, 16 LiRA reference models (trained together) on Cora and
one CeFGC generator (EDP-GNN score matching) on MUTAG, each timed on the CPU and on the GPU
in one run; the ratio is CPU / GPU. Each workload runs under ``fgl_workbench.device.on_device``
exactly as a suite cell with ``--device`` would, its dataset moved once.

    FGLWB_DATA=../shared/data python benchmarks/gpu.py [--device cuda]

Needs a visible GPU (it says so and stops otherwise). The GPU's numbers differ from the CPU's
within float tolerance only where the same generator stream is drawn: a CUDA generator draws
other numbers than a CPU one for the same seed (docs/performance.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.attacks.membership.reference import (
    ReferencePool,
    federation_of,
    inclusion_matrix,
)
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.datasets import to_device
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.device import on_device, resolve_device, seeded_generator
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.seeding import derive_seed
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.batched import train_batched
from fgl_workbench.targets.cefgc.generator import GeneratorConfig, train_generator, trainable
from fgl_workbench.targets.training import TrainingRecipe


def fedavg(device: torch.device) -> Callable[[], object]:
    ds = to_device(load_dataset("Cora"), device)
    fed = build_federation(ds, make_partition(ds, "louvain", 10, seed=0))
    return lambda: TARGETS.get("fedavg").fit(fed, {"rounds": 100, "local_epochs": 3}, [], 0)


def references(device: torch.device) -> Callable[[], object]:
    ds = to_device(load_dataset("Cora"), device)
    model = {"arch": "gcn", "hidden": 64}
    config = {"model": model, "rounds": 100, "local_epochs": 3, "release": "last"}
    recipe = TrainingRecipe("fedavg", config, 10, ds.num_items // 2)
    spec = ModelSpec(ModelConfig(**model), ds.num_features, ds.num_classes, "node")
    shards = ReferencePool._shards(ds, 10, seed=1)
    rows = inclusion_matrix(16, ds.num_items, 0.5, seed=0)
    partitions = [federation_of("node", shards, r) for r in rows]
    seeds = [derive_seed(0, i) for i in range(16)]
    return lambda: train_batched(recipe, spec, ds, partitions, seeds)


def cefgc_generator(device: torch.device) -> Callable[[], object]:
    ds = to_device(load_dataset("MUTAG"), device)
    cfg = GeneratorConfig(epochs=200)
    graphs = trainable(ds.graphs, cfg)
    return lambda: train_generator(graphs, cfg, seeded_generator(0))


WORKLOADS = {
    "FedAvg, Cora, 10 clients, 100 rounds": fedavg,
    "16 LiRA references, Cora": references,
    "CeFGC generator, MUTAG, 200 epochs": cefgc_generator,
}


def timed(make: Callable[[torch.device], Callable[[], object]], device: torch.device) -> float:
    with on_device(device):
        run = make(device)
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no GPU visible to PyTorch: nothing to compare (run on a machine with one)")
        sys.exit(1)
    gpu = resolve_device(args.device)
    print(
        f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}, {gpu}: "
        f"{torch.cuda.get_device_name(gpu)}"
    )
    print(f"{'workload':<40}{'CPU s':>9}{'GPU s':>9}{'ratio':>8}")
    for name, make in WORKLOADS.items():
        cpu_s = timed(make, torch.device("cpu"))
        timed(make, gpu)  # warm-up: CUDA context, kernels
        gpu_s = timed(make, gpu)
        print(f"{name:<40}{cpu_s:>9.1f}{gpu_s:>9.1f}{cpu_s / gpu_s:>8.1f}")


if __name__ == "__main__":
    main()
