"""Runs a suite's cells and writes each result to the store as soon as it exists.

A cell is (dataset, partition, target, seed); its attacks run against the trained target.
Cells whose row and every attack row are already stored are skipped, so an interrupted suite
resumes where it stopped; the same seed gives the same numbers, so resumed and uninterrupted
runs agree. This module plans (what is pending) and hands the cells to an executor
(``fgl_workbench.running.executors``); ``fgl_workbench.running.cell`` runs each one."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from pydantic import ValidationError

from fgl_workbench.data import catalog
from fgl_workbench.data.federation import build_federation
from fgl_workbench.device import on_device, resolve_device
from fgl_workbench.errors import ConfigError
from fgl_workbench.progress import Progress
from fgl_workbench.registry import reading_untrusted
from fgl_workbench.running.cell import CellJob, attack_cell, auditable, cell_dataset, partition_cell
from fgl_workbench.running.executors import EXECUTORS, Executor, effective, run_jobs
from fgl_workbench.running.isolated import admit
from fgl_workbench.running.suite import AttackEntry, Suite, expand
from fgl_workbench.running.threads import Threads, check_requested, machine_threads
from fgl_workbench.storage.snapshot import restore
from fgl_workbench.storage.store import EXTERNAL, ResultsStore, writing
from fgl_workbench.thread_limits import intra_op

__all__ = ["EXECUTORS", "Executor", "RunSummary", "attack_stored", "run_suite"]


@dataclass(frozen=True)
class RunSummary:
    out_dir: Path
    cells_total: int
    cells_run: int
    cells_skipped: int
    threads: Threads  # each cell's intra-op threads and why


def run_suite(
    suite: Suite,
    out_dir: str | Path,
    data_root: str | None = None,
    quiet: bool = False,
    jobs: int = 1,
    executor: Executor = "serial",
    address: str = "local",
    threads: int | None = None,
) -> RunSummary:
    """Runs every pending cell on the suite's device. ``serial``: cells one after another,
    ``jobs`` worker processes training each cell's shadow and reference models.
    ``process``: ``jobs`` processes (this one and ``jobs − 1`` workers) each running whole
    cells (references in-process).
    ``ray``: every cell a Ray task on the instance at ``address`` (``local`` starts one with
    ``jobs`` CPUs). ``threads``: each cell's intra-op threads (None: sized to the free cores,
    ``fgl_workbench.running.threads``), stated once unless ``quiet``. The numbers depend on
    none of these but the thread count, and on it only in float rounding."""
    if jobs < 1:
        raise ConfigError(f"--jobs: expected a whole number >= 1 (got {jobs})")
    check_requested(threads)
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: expected one of {', '.join(EXECUTORS)} (got {executor!r})")
    device = str(resolve_device(suite.device, "device"))
    root = data_root or suite.data_root
    admit([a.name for a in suite.attacks], suite.trust_plugins, guarded(out_dir, root))
    with writing(out_dir):
        store = ResultsStore(out_dir)
        if store.meta(EXTERNAL) is not None:
            store.close()
            raise ConfigError(
                f"--out {out_dir}: holds audits of models trained outside the workbench; run "
                "the suite into another folder"
            )
        streams = store.streams(suite.reproducible)
        store.set_meta("suite_name", suite.name)
        store.set_meta("suite_json", suite.model_dump_json())
        same_device(store, device, "device")
        store.set_meta("device", device)
        cells = expand(suite)
        # the serial executor's cells use the --jobs workers for their reference models
        reference_jobs = jobs if executor == "serial" else 1
        todo: list[CellJob] = []
        for cell in cells:
            pending = [a for a in cell.attacks if a.key not in store.done_attacks(cell.cell_id)]
            unaudited = auditable(cell) and not store.has_audit(cell.cell_id)
            if not store.has_cell(cell.cell_id) or pending or unaudited:
                job = CellJob(cell, pending, root, suite.delta, streams, device, reference_jobs)
                todo.append(job)
        store.close()
        plan = machine_threads(threads, effective(executor, jobs, len(todo)), jobs)
        if not quiet and todo:
            print(plan.describe(), flush=True)
        with intra_op(plan.per_cell), Progress(len(todo), suite.name, quiet) as progress:
            run_jobs(executor, todo, out_dir, progress, plan.per_cell, jobs, address)
        return RunSummary(Path(out_dir), len(cells), len(todo), len(cells) - len(todo), plan)


def attack_stored(
    out_dir: str | Path,
    attacks: list[AttackEntry],
    data_root: str | None = None,
    jobs: int = 1,
    quiet: bool = False,
    device: str | None = None,
    trust_plugins: bool = False,
    threads: int | None = None,
) -> tuple[int, int]:
    """Runs ``attacks`` against every trained target a results folder stored, without
    retraining: the cell's federation is rebuilt from its seed, the target read back from
    its snapshot (``weights_only``). Attacks stored already are skipped; plug-ins run unfenced
    only with ``trust_plugins``; ``threads`` as ``run_suite``'s (cells one at a time). Unless
    ``quiet``, the run's progress bar counts the cells to attack and names the attack running.
    Returns (cells attacked, cells without a snapshot)."""
    plan = machine_threads(threads, "serial", 1)
    if not quiet:
        print(plan.describe(), flush=True)
    admit([a.name for a in attacks], trust_plugins, guarded(out_dir, data_root))
    with (
        writing(out_dir, create=False),
        reading_untrusted(f"the results folder {out_dir}"),
        intra_op(plan.per_cell),
    ):
        return _attack_stored(out_dir, attacks, data_root, jobs, quiet, device, trust_plugins)


def _attack_stored(
    out_dir: str | Path,
    attacks: list[AttackEntry],
    data_root: str | None,
    jobs: int,
    quiet: bool,
    device: str | None,
    trust_plugins: bool,
) -> tuple[int, int]:
    store = ResultsStore(out_dir, create=False)
    try:
        raw = store.meta("suite_json")
        if raw is None:
            raise ConfigError(f"{out_dir}: not a results folder (no suite recorded)")
        if store.meta(EXTERNAL) is not None:
            raise ConfigError(
                f"{out_dir}: audits of models trained outside the workbench, which reading a "
                "folder cannot restore (it never runs code); to add attacks, run the same "
                "audit_model(..., out=) or audit_uploads(..., out=) with them: rows stored "
                "are kept"
            )
        # the stored suite's trust was the run's; these attacks are trusted by this call
        suite = stored_suite(raw, out_dir).model_copy(update={"trust_plugins": trust_plugins})
        stored = store.meta("device")
        where = resolve_device(device or stored or "auto", "--device")
        same_device(store, str(where), "--device")
        streams = store.streams()
        cells = {c.cell_id: c for c in expand(suite)}
        todo, missing = [], 0
        for row in store.cells():
            cell, path = cells.get(row.cell_id), store.target_path(row.cell_id)
            if cell is None or not path.exists():
                missing += 1
                continue
            pending = [a for a in attacks if a.key not in store.done_attacks(cell.cell_id)]
            if pending:
                todo.append((cell, path, pending))
        with Progress(len(todo), f"{suite.name}: attack", quiet) as progress:
            for cell, path, pending in todo:
                stage = partial(progress.stage, cell.label)
                stage("restore")
                dataset = cell_dataset(cell, data_root, where)
                with on_device(where):
                    partitioned = partition_cell(cell, dataset, streams)
                    federation = build_federation(dataset, partitioned.partition)
                    trained = restore(path, federation)
                    attack_cell(
                        cell, pending, trained, federation, store, streams, suite.delta, jobs, stage
                    )
                progress.finished(cell.label)
        return len(todo), missing
    finally:
        store.close()


def stored_suite(raw: str, out_dir: str | Path) -> Suite:
    """The suite a folder records, checked; one this version cannot rebuild is one line."""
    try:
        return Suite.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "suite"
        raise ConfigError(
            f"{out_dir}: its recorded suite cannot be rebuilt ({where}: {first['msg']})"
        ) from None


def guarded(out_dir: str | Path, root: str | None) -> list[Path]:
    """What a plug-in attack must not read: the results folder, the data root, the cache."""
    return [Path(out_dir), catalog.data_root(root), catalog.cache_root()]


def same_device(store: ResultsStore, device: str, field: str) -> None:
    """A folder's cells come from one device: a GPU's numbers differ from the CPU's, so a
    resumed suite (or added attacks) on another device would mix them in one table."""
    stored = store.meta("device")
    if stored is not None and stored != device and store.cells():
        raise ConfigError(
            f"{field}: this results folder's cells ran on {stored}, not {device} (numbers "
            f"differ between devices); resume with --device {stored}, or use another --out"
        )
