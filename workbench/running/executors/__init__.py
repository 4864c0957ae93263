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
    threads: int,
    workers: int = 1,
    address: str = "local",
) -> None:
    """Runs every job with ``executor``: ``workers`` processes (process, local Ray CPUs);
    ``address`` the Ray instance (``local``, ``auto`` or a cluster's address); ``threads``
    intra-op threads per cell (this process's count is the caller's to set)."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: expected one of {', '.join(EXECUTORS)} (got {executor!r})")
    chosen = effective(executor, workers, len(jobs))
    if chosen == "ray":
        from fgl_workbench.running.executors.ray import run_on_ray

        run_on_ray(jobs, out_dir, progress, workers, address, threads)
    elif chosen == "process":
        from fgl_workbench.running.executors.process import run_in_processes

        run_in_processes(jobs, out_dir, progress, workers, threads)
    else:
        from fgl_workbench.running.executors.serial import run_serially

        run_serially(jobs, out_dir, progress)


def effective(executor: Executor, workers: int, cells: int) -> Executor:
    """The executor that actually runs ``cells``: the process executor with one worker or
    one cell is the serial one."""
    if executor == "process" and (workers < 2 or cells < 2):
        return "serial"
    return executor
