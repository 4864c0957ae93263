"""Seconds per round and bytes per client per round of the ``flower`` target with and without
Flower's SecAgg+ (``secure_aggregation: secaggplus``: the legacy DefaultWorkflow with
SecAggPlusWorkflow, ``secaggplus_mod`` on the clients), Cora (Louvain, 3 clients; GCN hidden
64, 3 local epochs), 2 rounds, one fit each after a one-round warm-up of each, in the same
process; prints the ratios secaggplus / plain and client 0's round-1 messages under SecAgg+.

    FGLWB_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/flower_secaggplus.py
"""

from __future__ import annotations

import argparse
import logging
import os

from flower import bytes_per_client_round, fit, messages_of

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition

COMMON = {"model": {"arch": "gcn", "hidden": 64}, "local_epochs": 3}
VARIANTS = (("plain", {}), ("secaggplus", {"secure_aggregation": "secaggplus"}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    ds = load_dataset("Cora")
    fed = build_federation(ds, make_partition(ds, "louvain", args.clients, seed=0))
    for _, extra in VARIANTS:  # warm-up: first calls, Flower's imports
        fit(fed, "flower", {**COMMON, **extra, "rounds": 1}, False)
    rows = {}
    for label, extra in VARIANTS:
        seconds, _, transcript = fit(
            fed, "flower", {**COMMON, **extra, "rounds": args.rounds}, False
        )
        rows[label] = (seconds / args.rounds, bytes_per_client_round(transcript, args.clients))
        if label == "secaggplus":
            print("client 0, round 1 under SecAgg+:", messages_of(transcript))
    print(f"load {os.getloadavg()[0]:.1f}; Cora, {args.clients} clients, {args.rounds} rounds")
    for label, (s, b) in rows.items():
        print(
            f"{label}: {s:.3f} s/round; bytes/client/round up {b['up']:,.0f} "
            f"down {b['down']:,.0f} total {b['total']:,.0f}"
        )
    (s0, b0), (s1, b1) = rows["plain"], rows["secaggplus"]
    print(
        f"ratio secaggplus/plain: {s1 / s0:.2f}x seconds, {b1['total'] / b0['total']:.2f}x "
        f"bytes (up {b1['up'] / b0['up']:.2f}x, down {b1['down'] / b0['down']:.2f}x)"
    )


if __name__ == "__main__":
    main()
