"""How the workbench scales with the graph: the synthetic CSBM at 10k, 100k and 1M nodes
(average degree 10), 10 Metis clients (or Leiden, ``--partitioner leiden``: slower at a
million nodes, where the CSBM has no community structure finer than its four blocks), FedAvg
10 rounds and the loss-threshold MIA, each size in a fresh process so its peak memory is its
own. Prints wall time (and its parts: dataset, partition, training, attack) and peak resident
memory per size, and the growth exponent b of time ≈ a·N^b between the smallest and largest
size.

    python benchmarks/scale.py [--sizes 10000,100000,1000000] [--partitioner metis]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import tempfile
import time


def suite(n: int, partitioner: str) -> dict:
    return {
        "name": f"scale-{n}",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": "csbm", "params": {"num_nodes": n, "avg_degree": 10.0}}],
        "partitions": [{"method": partitioner, "num_clients": 10, "aux_fraction": 0.1}],
        "targets": [{"name": "fedavg", "params": {"rounds": 10, "local_epochs": 3}}],
        "attacks": [{"name": "mia-threshold", "params": {"signal": "loss", "hops": 0}}],
    }


def one(n: int, partitioner: str) -> None:
    """Runs one size in this process and prints its figures as JSON."""
    from fgl_workbench.data.catalog import load_dataset
    from fgl_workbench.interface import api

    start = time.perf_counter()
    load_dataset("csbm", {"num_nodes": n, "avg_degree": 10.0})  # timed apart, then cached
    dataset = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        api.run_suite(suite(n, partitioner), out)
        wall = time.perf_counter() - start
        store = api.ResultsStore(out)
        (cell,) = store.cells()
        (row,) = store.attacks()
    figures = {
        "nodes": n,
        "wall": wall + dataset,
        "dataset": dataset,
        "partition": cell.seconds_partition,
        "train": cell.seconds_train,
        "attack": row.seconds,
        "auc": row.metrics["auc"],
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--partitioner", default="metis")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(args.one, args.partitioner)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"CSBM, average degree 10, 10 {args.partitioner} clients, FedAvg 10 rounds, loss MIA")
    head = ("nodes", "wall s", "dataset", "partition", "train", "attack", "peak GiB", "AUC")
    print("".join(f"{h:>11}" for h in head))
    rows = []
    for n in sizes:
        cmd = [sys.executable, __file__, "--one", str(n), "--partitioner", args.partitioner]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"{n:>11}  failed:\n{done.stderr[-2000:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(r)
        cells = (r["wall"], r["dataset"], r["partition"], r["train"], r["attack"])
        print(
            f"{n:>11}"
            + "".join(f"{c:>11.1f}" for c in cells)
            + f"{r['peak_mb'] / 1024:>11.2f}{r['auc']:>11.3f}"
        )
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        growth = math.log(b["wall"] / a["wall"]) / math.log(b["nodes"] / a["nodes"])
        print(f"growth exponent of wall time, {a['nodes']} → {b['nodes']} nodes: {growth:.2f}")


if __name__ == "__main__":
    main()
