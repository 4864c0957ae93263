"""What CeFGC's generator budget costs on a device, and so what budget a device allows.

For each dataset of the paper's Table 2 (IID over 3 clients, 70/10/20, as
examples/reproduction/cefgc-table2.yaml), it times on the real code paths, for the whole
federation: one generator epoch (every client training its generators) and one Langevin step
per noise level (every client sampling its synthetic graphs from the generators it received).
Both costs are linear in their budget, so each is the difference of two small budgets divided
by their gap (start-up and padding cancel), and one cell's generator time at any budget is
epochs × the first + steps × the second. The GIN's training is left out (seconds).

    FGLWB_DATA=../shared/data python benchmarks/cefgc_budget.py [--device cuda] [--datasets MUTAG]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.datasets import to_device
from fgl_workbench.data.federation import Federation, build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.device import on_device, resolve_device, seeded_generator
from fgl_workbench.targets.cefgc.generator import GeneratorConfig, client_generators, trainable
from fgl_workbench.targets.cefgc.target import CeFGCConfig, shuffled_senders, synthesise

TABLE2 = ("MUTAG", "ENZYMES", "PROTEINS", "IMDB-BINARY", "IMDB-MULTI")
# (generator epochs, Langevin steps): the CPU suites' budget, and the paper's
BUDGETS = {"10/50": (10, 50), "5001/1000": (5001, 1000)}
SMALL, LARGE = 2, 6  # the two budgets each unit cost is the difference of


def federation(name: str, device: torch.device) -> Federation:
    ds = to_device(load_dataset(name), device)
    return build_federation(ds, make_partition(ds, "iid", 3, seed=0, split=(0.7, 0.1, 0.2)))


def synced(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def generators(
    fed: Federation, cfg: GeneratorConfig, star: bool, device: torch.device
) -> tuple[float, list]:
    """Seconds for every client's round-1 generators, and the uploads."""
    gen = seeded_generator(0)
    start = synced(device)
    uploads = [client_generators(trainable(c.train, cfg), cfg, star, gen) for c in fed.clients]
    return synced(device) - start, uploads


def sampling(fed: Federation, uploads: list, cfg: GeneratorConfig, device: torch.device) -> float:
    """Seconds for every client's synthetic graphs, from every other client's generators."""
    gen = seeded_generator(0)
    senders = shuffled_senders(len(uploads), np.random.default_rng(0))
    config = CeFGCConfig(generator=cfg)
    features = fed.dataset.num_features
    start = synced(device)
    for k, c in enumerate(fed.clients):
        received = [uploads[j] for j in senders[k]]
        synthesise(received, c, config, features, gen)
    return synced(device) - start


def unit_costs(fed: Federation, star: bool, device: torch.device) -> tuple[float, float]:
    """(seconds per generator epoch, seconds per Langevin step), for the federation."""
    base = GeneratorConfig(max_nodes=30)  # the suites' (the EDP-GNN code's PROTEINS filter)
    small = base.model_copy(update={"epochs": SMALL, "steps": SMALL})
    large = base.model_copy(update={"epochs": LARGE, "steps": LARGE})
    generators(fed, small, star, device)  # warm-up: the device's context and kernels
    t_small, uploads = generators(fed, small, star, device)
    t_large, _ = generators(fed, large, star, device)
    s_small = sampling(fed, uploads, small, device)
    s_large = sampling(fed, uploads, large, device)
    gap = LARGE - SMALL
    return (t_large - t_small) / gap, (s_large - s_small) / gap


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--datasets", nargs="+", default=list(TABLE2))
    args = parser.parse_args()
    device = resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {device} ({name}), {torch.get_num_threads()} CPU threads")
    head = "".join(f"{b + ' min':>16}" for b in BUDGETS)
    print(f"{'dataset':<13}{'method':<8}{'s/epoch':>9}{'s/step':>9}{head}")
    with on_device(device):
        for dataset in args.datasets:
            fed = federation(dataset, device)
            for method, star in (("CeFGC", False), ("CeFGC*", True)):
                epoch, step = unit_costs(fed, star, device)
                minutes = [(e * epoch + s * step) / 60 for e, s in BUDGETS.values()]
                cells = "".join(f"{m:>16.1f}" for m in minutes)
                print(f"{dataset:<13}{method:<8}{epoch:>9.3f}{step:>9.3f}{cells}", flush=True)


if __name__ == "__main__":
    main()
