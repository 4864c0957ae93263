"""Executors: how a suite's pending cells are run. ``serial`` one after another in this
process; ``process`` on this machine's cores, this process and worker processes pulling cells
from one queue; ``ray`` as Ray tasks, on this machine or a cluster. All take the same
``CellJob``s, write each cell's rows as soon as it is done, and change no number."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from fgl_workbench.errors import ConfigError
from fgl_workbench.progress import Progress
from fgl_workbench.running.cell import CellJob

Executor = Literal["serial", "process", "ray"]
EXECUTORS: tuple[str, ...] = get_args(Executor)


def run_jobs(
    executor: Executor,
    jobs: list[CellJob],
    out_dir: str | Path,
    progress: Progress,
    workers: int = 1,
    address: str = "local",
) -> None:
    """Runs every job with ``executor``: ``workers`` processes (process, local Ray CPUs);
    ``address`` the Ray instance (``local``, ``auto`` or a cluster's address)."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: expected one of {', '.join(EXECUTORS)} (got {executor!r})")
    if executor == "ray":
        from fgl_workbench.running.executors.ray import run_on_ray

        run_on_ray(jobs, out_dir, progress, workers, address)
    elif executor == "process" and workers > 1 and len(jobs) > 1:
        from fgl_workbench.running.executors.process import run_in_processes

        run_in_processes(jobs, out_dir, progress, workers)
    else:
        from fgl_workbench.running.executors.serial import run_serially

        run_serially(jobs, out_dir, progress)
