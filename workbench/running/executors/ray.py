"""Cells as Ray Core tasks, for suites too large for one machine.

The driver loads each dataset once and puts it in the object store; each distinct
(dataset, partition, seed) is partitioned once by a task whose result the cells that share it
take by reference. A cell task returns its rows instead of writing them, since a worker on
another node may not see the driver's disk; the driver writes each cell's rows as it finishes,
so an interrupted suite resumes like the other executors'. A task whose worker dies is retried
(``RETRIES``); an error raised by the cell itself is not, and stops the suite.

Ray is an optional extra: ``pip install 'fgl-workbench[ray]'``. Workers of a cluster need the
project installed; they need no datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.datasets import Dataset, to_device
from fgl_workbench.device import on_device
from fgl_workbench.errors import ConfigError, WorkbenchError
from fgl_workbench.progress import Progress
from fgl_workbench.running.cell import CellJob, Partitioned, dataset_key, partition_cell, run_cell
from fgl_workbench.running.suite import Cell, config_hash
from fgl_workbench.seeding import Streams
from fgl_workbench.storage.store import BufferedResults, ResultsStore
from fgl_workbench.thread_limits import intra_op

RETRIES = 3


def run_on_ray(
    jobs: list[CellJob],
    out_dir: str | Path,
    progress: Progress,
    cpus: int,
    address: str,
    threads: int = 1,
) -> None:
    """Submits every pending cell and writes each one's rows as it completes. ``address``:
    ``local`` starts a private instance with ``cpus`` CPUs (all cores when ``cpus`` is 1),
    ``auto`` joins the running cluster, anything else is passed to ``ray.init``; ``threads``:
    each task's intra-op threads (one by default: a task holds one CPU)."""
    ray = _import_ray()
    if not jobs:  # nothing to run: no instance to start
        return
    started = not ray.is_initialized()
    if started:
        _init(ray, address, cpus)
    try:
        partition_task = ray.remote(num_cpus=1, max_retries=RETRIES)(_partition)
        # a task sees only the GPUs Ray assigns it: a share of one when cells run on CUDA
        cuda = any(job.device.startswith("cuda") for job in jobs)
        gpu_share = 1 / max(cpus, 1) if cuda else 0
        cell_task = ray.remote(num_cpus=1, num_gpus=gpu_share, max_retries=RETRIES)(_cell)
        datasets: dict[str, Any] = {}
        partitions: dict[str, Any] = {}
        refs = {}
        for job in jobs:
            cell = job.cell
            dkey = dataset_key(cell, job.data_root)
            if dkey not in datasets:
                loaded = load_dataset(cell.dataset.name, cell.dataset.params, job.data_root)
                datasets[dkey] = ray.put(loaded)
            pkey = config_hash([dkey, cell.partition.model_dump(), cell.seed])
            if pkey not in partitions:
                partitions[pkey] = partition_task.remote(cell, datasets[dkey], job.streams, threads)
            refs[cell_task.remote(job, datasets[dkey], partitions[pkey], threads)] = cell
        store = ResultsStore(out_dir)
        total = int(ray.cluster_resources().get("CPU", 1))
        try:
            waiting = list(refs)
            while waiting:
                (ready,), waiting = ray.wait(waiting, num_returns=1)
                _get(ray, ready).write_to(store)
                progress.finished(refs[ready].label, min(total, len(waiting)))
        finally:
            store.close()
    finally:
        if started:
            ray.shutdown()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray: Ray is not installed; install the extra with "
            "`pip install 'fgl-workbench[ray]'`"
        ) from None
    except Exception as exc:  # an installed Ray that is broken: said in one line
        raise ConfigError(f"--executor ray: Ray failed to import ({_one_line(exc)})") from None
    return ray


def _init(ray: Any, address: str, cpus: int) -> None:
    if not address:
        raise ConfigError("--address: expected 'local', 'auto' or a Ray address (got '')")
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": "ERROR",
    }
    if address == "local":
        options["num_cpus"] = cpus if cpus > 1 else None
    else:
        options["address"] = address
    try:
        ray.init(**options)
    except ConnectionError as exc:
        raise ConfigError(f"--address {address}: no Ray cluster reachable ({exc})") from None
    except Exception as exc:  # Ray could not start (ports, /tmp, a bad address): one line
        raise ConfigError(
            f"--executor ray: Ray failed to start at --address {address} ({_one_line(exc)})"
        ) from None


def _one_line(exc: Exception) -> str:
    """The exception's type and first line: Ray's own messages run to pages."""
    first = str(exc).strip().splitlines()[:1]
    return type(exc).__name__ + (f": {first[0]}" if first else "")


def _get(ray: Any, ref: Any) -> BufferedResults:
    """The task's value; a workbench error raised inside the task is re-raised as itself, so
    the command line reports it in one line like any other."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, WorkbenchError):
            raise exc.cause from None
        raise


def _partition(cell: Cell, dataset: Dataset, streams: Streams, threads: int) -> Partitioned:
    with intra_op(threads):
        return partition_cell(cell, dataset, streams)


def _cell(
    job: CellJob, dataset: Dataset, partitioned: Partitioned, threads: int
) -> BufferedResults:
    results = BufferedResults()
    # Ray renumbers the GPUs it hands a task from 0
    where = torch.device("cuda", 0) if job.device.startswith("cuda") else torch.device("cpu")
    with intra_op(threads), on_device(where):
        run_cell(
            job.cell,
            job.attacks,
            to_device(dataset, where),
            results,
            job.streams,
            job.delta,
            partitioned=partitioned,
        )
    return results
