"""Wall time of an 8-cell suite of realistic cells (real Cora, FedAvg over 10 Louvain clients,
100 rounds, 8 seeds, loss-threshold MIA: 10-20 s each) with the serial executor, the process
executor (2 processes) and the Ray executor (a local instance with 2 CPUs, its start-up
included), each into a fresh results folder; the speed-up is serial / executor. Every cell
has one intra-op thread (``threads=1``), serial and parallel alike, so the speed-up is the
executor's alone and every run's rows equal the serial run's.

It needs an idle machine: another job on a core turns the measure into a measure of that job
(the load averages are printed before and after).

    FGLWB_DATA=../shared/data python benchmarks/suite.py
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import torch

from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite

SUITE = {
    "name": "bench-8",
    "reproducible": True,  # the same streams in every folder, so the rows can be compared
    "seeds": [0, 1, 2, 3, 4, 5, 6, 7],
    "datasets": [{"name": "Cora"}],
    "partitions": [{"method": "louvain", "num_clients": 10, "aux_fraction": 0.1}],
    "targets": [{"name": "fedavg", "params": {"rounds": 100, "local_epochs": 3}}],
    "attacks": [{"name": "mia-threshold", "params": {"signal": "loss"}}],
}


def rows(out: Path) -> list:
    db = sqlite3.connect(out / "results.sqlite")
    return db.execute("SELECT cell_id, utility_json FROM cells ORDER BY 1").fetchall()


def difference(a: list, b: list) -> str:
    """Identical, or the largest difference in a utility figure (a cell's reductions round
    with its thread count, the same here everywhere, so any difference is a bug)."""
    if a == b:
        return "identical rows"
    gaps = [
        abs(x[k] - y[k])
        for (ida, ua), (idb, ub) in zip(a, b, strict=True)
        for x, y in [(json.loads(ua), json.loads(ub))]
        for k in x
        if ida == idb and isinstance(x[k], float)
    ]
    return f"same cells, utility figures differ by at most {max(gaps):.2g}"


def main() -> None:
    suite = parse_suite(SUITE)
    print(
        f"torch {torch.__version__}, one intra-op thread per cell, 8 cells (needs an idle machine)"
    )
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"{'executor':<22}{'wall s':>9}{'speed-up':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        timings = {}
        for name, kwargs in [
            ("serial", {}),
            ("process, 2 processes", {"executor": "process", "jobs": 2}),
            ("ray, local 2 CPUs", {"executor": "ray", "jobs": 2}),
        ]:
            out = Path(tmp) / name.split(",")[0]
            start = time.perf_counter()
            run_suite(suite, out, quiet=True, threads=1, **kwargs)
            timings[name] = time.perf_counter() - start
            speed = timings["serial"] / timings[name]
            print(f"{name:<22}{timings[name]:>9.1f}{speed:>10.2f}")
        serial = rows(Path(tmp) / "serial")
        for name in ("process", "ray"):
            print(f"{name} vs serial: {difference(rows(Path(tmp) / name), serial)}")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
