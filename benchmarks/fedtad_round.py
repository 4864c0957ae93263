"""Seconds per round of FedTAD against FedAvg on Cora (Louvain, 10 clients): what the server's
distillation (I = 5 generator/student alternations on 100 pseudo-nodes against every client's
model) adds to a FedAvg round, and the share of it spent computing the reliabilities once.

    FGLWB_DATA=../shared/data python benchmarks/fedtad_round.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import time

import torch

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.fedtad.reliability import class_reliability


def seconds_per_round(name: str, fed, rounds: int) -> float:
    target = TARGETS.get(name)
    start = time.perf_counter()
    target.fit(fed, target.Config(rounds=rounds, local_epochs=3), [], seed=0)
    return (time.perf_counter() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    ds = load_dataset("Cora")
    fed = build_federation(ds, make_partition(ds, "louvain", 10, seed=0))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, rounds {args.rounds}")
    fedavg = seconds_per_round("fedavg", fed, args.rounds)
    fedtad = seconds_per_round("fedtad", fed, args.rounds)
    start = time.perf_counter()
    for c in fed.clients:
        d = c.data
        class_reliability(
            d.x, d.edge_index, d.y.numpy(force=True), d.train_mask.numpy(force=True), ds.num_classes
        )
    once = time.perf_counter() - start
    print(
        f"{'setting':<10}{'FedAvg s/round':>16}{'FedTAD s/round':>16}{'ratio':>8}{'φ once s':>10}"
    )
    print(f"{'Cora-10':<10}{fedavg:>16.4f}{fedtad:>16.4f}{fedtad / fedavg:>8.2f}{once:>10.3f}")


if __name__ == "__main__":
    main()
