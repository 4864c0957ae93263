"""Cells on this machine's cores: this process and ``workers − 1`` worker processes pull cells
from one queue, each with the runner's intra-op thread count (its share of the free cores).

Workers are spawned once per suite (fork with live OpenMP pools can hang) and keep the
datasets they load (``fgl_workbench.running.cell.cell_dataset``), so no cell pays a start-up; and
since this process has everything imported already, it runs cells while the workers start (a spawned
worker spends ~5 s importing torch and PyG)."""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from fgl_workbench.progress import Progress
from fgl_workbench.running.cell import CellJob, run_job


def run_in_processes(
    jobs: list[CellJob], out_dir: str | Path, progress: Progress, workers: int, threads: int
) -> None:
    """Runs ``jobs`` here and in ``workers − 1`` spawned workers, each cell with ``threads``
    intra-op threads (this process's count is already set by the caller)."""
    queue = deque(jobs)
    lock = threading.Lock()
    failures: list[BaseException] = []
    running = [0]
    all_done = threading.Event()

    def take() -> CellJob | None:
        with lock:
            if failures or not queue:
                return None
            running[0] += 1
            return queue.popleft()

    def done(job: CellJob, error: BaseException | None) -> None:
        with lock:
            running[0] -= 1
            if error is not None:
                failures.append(error)
            left = running[0]
            finished = not left and (failures or not queue)
        if error is None:
            progress.finished(job.cell.label, left)
        if finished:
            all_done.set()

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers - 1, mp_context=context) as pool:

        def submit() -> None:
            job = take()
            if job is None:
                return
            try:
                future = pool.submit(run_job, job, out_dir, threads)
            except RuntimeError as exc:  # the pool shut down (an interrupt): nothing lost
                done(job, exc)
                return
            future.add_done_callback(lambda f, j=job: after(f, j))

        def after(future: Future, job: CellJob) -> None:
            done(job, future.exception())
            submit()  # the worker that finished takes the next cell

        for _ in range(workers - 1):
            submit()
        while (job := take()) is not None:
            try:
                run_job(job, out_dir)
            except BaseException as exc:
                done(job, exc)
                raise
            done(job, None)
        with lock:
            idle = not running[0]
        if not idle:
            all_done.wait()
    if failures:
        raise failures[0]
