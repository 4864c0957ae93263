"""One thread count for every pool a computation reaches, not only torch's: numpy's and
scipy's OpenBLAS otherwise start one thread per core in each process, whatever torch was told.
Two process-executor workers of one torch thread each then took 19 s a Cora cell instead of
12 s (the 8-cell suite 1.52× serial instead of 1.89× on two idle cores)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from threadpoolctl import threadpool_limits


@contextmanager
def intra_op(threads: int) -> Iterator[None]:
    """Runs the block with ``threads`` threads in torch and in every BLAS and OpenMP pool
    loaded (``threadpoolctl``), then gives the caller back its own counts (an API caller's
    process keeps its settings)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        torch.set_num_threads(before)
