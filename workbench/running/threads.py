"""How many intra-op threads each cell gets.

PyTorch's default, one thread per physical core, assumes an idle machine: when another
process keeps a core busy, every parallel kernel waits at its barrier for the thread that
shares that core (the quickstart took 17 min instead of 80 s on two cores, one of them busy).
So a run gives its cells the cores other work leaves free (the 1-minute load average
subtracted), shared among the executor's workers; an explicit count (``--threads``, or
``OMP_NUM_THREADS`` in the environment) wins. The count binds every thread pool a cell
reaches (``fgl_workbench.thread_limits``)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from fgl_workbench.errors import ConfigError


@dataclass(frozen=True)
class Threads:
    """Each cell's intra-op thread count and where it comes from."""

    per_cell: int
    reason: str

    def describe(self) -> str:
        """The one line a run states before its cells start."""
        return f"intra-op threads: {self.per_cell} per cell ({self.reason}; --threads N to change)"


def free_cores(cores: int, load: float) -> int:
    """The cores other work leaves: ``cores`` less the load rounded to whole cores, at least
    one (a cell always runs)."""
    return max(1, cores - math.floor(load + 0.5))


def check_requested(requested: int | None) -> int | None:
    """``--threads`` as given, refused in one line unless a whole number >= 1 (or None)."""
    if requested is not None and (isinstance(requested, bool) or requested < 1):
        raise ConfigError(f"--threads: expected a whole number >= 1 (got {requested})")
    return requested


def choose_threads(
    requested: int | None,
    executor: str,
    workers: int,
    cores: int,
    load: float,
    torch_threads: int,
    environ: Mapping[str, str],
) -> Threads:
    """Pure: ``requested`` (--threads) if given; else ``OMP_NUM_THREADS`` if set (torch read it
    into ``torch_threads``); one per Ray task (Ray gives each task one CPU); else the free
    cores, divided among ``workers`` cells at a time for the process executor, never more
    than torch's own default ``torch_threads``."""
    if check_requested(requested) is not None:
        return Threads(requested, "as asked")
    if environ.get("OMP_NUM_THREADS", "").strip():
        return Threads(torch_threads, "OMP_NUM_THREADS")
    if executor == "ray":
        return Threads(1, "one per Ray task, which holds one CPU")
    free = free_cores(cores, load)
    share = max(1, free // workers) if executor == "process" else free
    reason = f"{cores} cores, load {load:.1f}, {free} free"
    if executor == "process":
        reason += f", {workers} cells at a time"
    if torch_threads < share:
        reason += f", torch's own count {torch_threads}"
    return Threads(min(share, torch_threads), reason)


def machine_threads(requested: int | None, executor: str, workers: int) -> Threads:
    """``choose_threads`` on this machine: the cores this process may run on, the 1-minute
    load average (0 where the system has none), torch's current count, the environment."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return choose_threads(
        requested, executor, workers, cores or 1, load, torch.get_num_threads(), os.environ
    )
