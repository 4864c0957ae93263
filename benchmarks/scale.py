"""How the workbench scales with the graph: the synthetic CSBM at 10k, 100k, 1M and 10M nodes
(average degree 10), 10 clients, FedAvg 10 rounds and the loss-threshold MIA, each size in a
fresh process so its peak memory (``getrusage``'s maximum resident set) is its own. Prints wall
time (and its parts: dataset, partition, training, attack), peak memory, the 1-minute load
average after the size, and between consecutive sizes the growth exponent b of time ≈ a·N^b
(and of memory).

Clients: Metis (``--partitioner metis``, the default), Leiden, or ``iid`` (label-Dirichlet with
a concentration so large that every client gets an even share of each class: a cheap
partitioner for the largest sizes, where Metis takes minutes; its clients keep about 1/10 of
the edges, Metis's several times more, so training is cheaper too). Every client here fits
full-batch training (10M nodes: about 0.9M nodes per client); ``fgl_workbench.targets.minibatch``
is for the ones that do not. The 10M point needs about 20 GiB free (see docs/performance.md).
Run it on an otherwise idle machine with ``OMP_NUM_THREADS=1``.

    OMP_NUM_THREADS=1 python benchmarks/scale.py [--sizes 10000,100000,1000000,10000000]
        [--partitioner metis|leiden|iid]
    OMP_NUM_THREADS=1 python benchmarks/scale.py --data-only 10000000   # CSBM, partition, clients
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

# label-Dirichlet with this concentration gives each client an even share of every class
EVEN_SHARES = {"method": "label-dirichlet", "params": {"alpha": 1e4}}


def suite(n: int, partitioner: str) -> dict:
    method = EVEN_SHARES if partitioner == "iid" else {"method": partitioner}
    return {
        "name": f"scale-{n}",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": "csbm", "params": {"num_nodes": n, "avg_degree": 10.0}}],
        "partitions": [{**method, "num_clients": 10, "aux_fraction": 0.1}],
        "targets": [{"name": "fedavg", "params": {"rounds": 10, "local_epochs": 3}}],
        "attacks": [{"name": "mia-threshold", "params": {"signal": "loss", "hops": 0}}],
    }


def data_only(n: int) -> None:
    """The stages before training at one size: CSBM, cheap partition, federation."""
    from fgl_workbench.data.catalog import load_dataset
    from fgl_workbench.data.federation import build_federation
    from fgl_workbench.data.partition import make_partition

    start = time.perf_counter()
    dataset = load_dataset("csbm", {"num_nodes": n, "avg_degree": 10.0})
    generated = time.perf_counter()
    even = EVEN_SHARES["params"]
    part = make_partition(dataset, EVEN_SHARES["method"], 10, 0, params=even, aux_fraction=0.1)
    partitioned = time.perf_counter()
    build_federation(dataset, part)
    built = time.perf_counter()
    print(
        f"{n:,} nodes, {dataset.data.edge_index.shape[1]:,} directed edges: CSBM "
        f"{generated - start:.1f} s, iid partition {partitioned - generated:.1f} s, federation "
        f"{built - partitioned:.1f} s; peak "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB, "
        f"load {os.getloadavg()[0]:.2f}"
    )


def one(n: int, partitioner: str) -> None:
    """Runs one size in this process and prints its figures as JSON."""
    from fgl_workbench.data.catalog import load_dataset
    from fgl_workbench.interface import api

    start = time.perf_counter()
    load_dataset("csbm", {"num_nodes": n, "avg_degree": 10.0})  # timed apart; the suite
    dataset = time.perf_counter() - start  # generates it again, inside its wall time
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        api.run_suite(suite(n, partitioner), out)
        wall = time.perf_counter() - start
        store = api.ResultsStore(out)
        (cell,) = store.cells()
        (row,) = store.attacks()
    figures = {
        "nodes": n,
        "wall": wall,
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
    parser.add_argument("--sizes", default="10000,100000,1000000,10000000")
    parser.add_argument("--partitioner", default="metis", help="metis, leiden or iid")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-only", type=int, help="time the data stages at this size")
    args = parser.parse_args()
    if args.data_only:
        return data_only(args.data_only)
    if args.one:
        return one(args.one, args.partitioner)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"CSBM, average degree 10, 10 {args.partitioner} clients, FedAvg 10 rounds, loss MIA")
    head = ("nodes", "wall s", "dataset", "partition", "train", "attack", "peak GiB", "AUC", "load")
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
            + f"{r['peak_mb'] / 1024:>11.2f}{r['auc']:>11.3f}{os.getloadavg()[0]:>11.2f}"
        )
    for a, b in zip(rows, rows[1:], strict=False):
        span = math.log(b["nodes"] / a["nodes"])
        time_b = math.log(b["wall"] / a["wall"]) / span
        memory_b = math.log(b["peak_mb"] / a["peak_mb"]) / span
        print(
            f"growth exponent {a['nodes']} → {b['nodes']} nodes: time {time_b:.2f}, "
            f"peak memory {memory_b:.2f}"
        )


if __name__ == "__main__":
    main()
