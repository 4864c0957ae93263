"""Wall time of a 12-cell suite (the embedded CSBM and real Cora, FedAvg over 5 Louvain
clients, 6 seeds each, loss-threshold MIA) with the serial executor, the process executor (2
workers) and the Ray executor (a local instance with 2 CPUs, its start-up included), each into
a fresh results folder; the speed-up is serial / executor. Every run's rows are compared with
the serial run's, since the executor must not change a number.

    FGLWB_DATA=../shared/data python benchmarks/suite.py
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path

import torch

from workbench.runner import run_suite
from workbench.suite import parse_suite

SUITE = {
    "name": "bench-12",
    "seeds": [0, 1, 2, 3, 4, 5],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 800}}, {"name": "Cora"}],
    "partitions": [{"method": "louvain", "num_clients": 5, "aux_fraction": 0.1}],
    "targets": [{"name": "fedavg", "params": {"rounds": 50, "local_epochs": 3}}],
    "attacks": [{"name": "mia-threshold", "params": {"signal": "loss"}}],
}


def rows(out: Path) -> list:
    db = sqlite3.connect(out / "results.sqlite")
    return db.execute("SELECT cell_id, utility_json FROM cells ORDER BY 1").fetchall()


def main() -> None:
    suite = parse_suite(SUITE)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, 12 cells")
    print(f"{'executor':<22}{'wall s':>9}{'speed-up':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        timings = {}
        for name, kwargs in [
            ("serial", {}),
            ("process, 2 workers", {"executor": "process", "jobs": 2}),
            ("ray, local 2 CPUs", {"executor": "ray", "jobs": 2}),
        ]:
            out = Path(tmp) / name.split(",")[0]
            start = time.perf_counter()
            run_suite(suite, out, quiet=True, **kwargs)
            timings[name] = time.perf_counter() - start
            speed = timings["serial"] / timings[name]
            print(f"{name:<22}{timings[name]:>9.1f}{speed:>10.2f}")
        serial = rows(Path(tmp) / "serial")
        for name in ("process", "ray"):
            print(f"{name} rows identical to serial: {rows(Path(tmp) / name) == serial}")


if __name__ == "__main__":
    main()
