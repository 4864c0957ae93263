"""Runs a suite's cells and writes each result to the store as soon as it exists.

A cell is (dataset, partition, target, seed); its attacks run against the trained target.
Cells whose row and every attack row are already stored are skipped, so an interrupted suite
resumes where it stopped; the same seed gives the same numbers, so resumed and uninterrupted
runs agree."""

from __future__ import annotations

import contextlib
import multiprocessing
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, get_args

import torch
from tqdm import tqdm

from accountants import PrivacyLedger, epsilon, epsilons_by_adversary
from accountants.accountant import OrderGridWarning
from attacks import ATTACKS, AttackInput
from attacks.families import FAMILIES
from attacks.family import CellInputs
from attacks.membership.reference import ReferencePool
from audits import GAMES, audit_run, context_of
from defenses import applied
from workbench.data.catalog import load_dataset
from workbench.data.datasets import Dataset
from workbench.data.federation import Federation, build_federation
from workbench.data.partition import Partition, make_partition
from workbench.device import on_device, resolve_device, to_device
from workbench.errors import ConfigError, NotApplicableError
from workbench.isolated import isolated, run_isolated
from workbench.registry import reading_untrusted
from workbench.seeding import Streams, seed_everything
from workbench.snapshot import SnapshotError, restore, snapshot
from workbench.store import AttackRow, CellRow, ResultSink, ResultsStore, writing
from workbench.suite import AttackEntry, Cell, Suite, config_hash, expand
from workbench.targets import TARGETS, TrainedTarget
from workbench.threat import (
    background_knowledge,
)


@dataclass(frozen=True)
class RunSummary:
    out_dir: Path
    cells_total: int
    cells_run: int
    cells_skipped: int


Executor = Literal["serial", "process", "ray"]
EXECUTORS: tuple[str, ...] = get_args(Executor)
Pending = list[tuple[Cell, list[AttackEntry]]]


def run_suite(
    suite: Suite,
    out_dir: str | Path,
    data_root: str | None = None,
    quiet: bool = False,
    jobs: int = 1,
    executor: Executor = "serial",
    address: str = "local",
) -> RunSummary:
    """Runs every pending cell on the suite's device. ``serial``: cells one after another,
    ``jobs`` worker processes training each cell's shadow and reference models.
    ``process``: ``jobs`` worker processes each running whole cells (references in-process).
    ``ray``: every cell a Ray task on the instance at ``address`` (``local`` starts one with
    ``jobs`` CPUs). The numbers depend on none of these."""
    if jobs < 1:
        raise ConfigError(f"--jobs: expected a whole number >= 1 (got {jobs})")
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: expected one of {', '.join(EXECUTORS)} (got {executor!r})")
    device = str(resolve_device(suite.device, "device"))
    with writing(out_dir):
        store = ResultsStore(out_dir)
        streams = store.streams(suite.reproducible)
        store.set_meta("suite_name", suite.name)
        store.set_meta("suite_json", suite.model_dump_json())
        store.set_meta("device", device)
        cells = expand(suite)
        todo: Pending = []
        for cell in cells:
            pending = [a for a in cell.attacks if a.key not in store.done_attacks(cell.cell_id)]
            unaudited = auditable(cell) and not store.has_audit(cell.cell_id)
            if not store.has_cell(cell.cell_id) or pending or unaudited:
                todo.append((cell, pending))
        store.close()
        root = data_root or suite.data_root
        with Progress(len(todo), suite.name, quiet) as progress:
            if executor == "ray":
                from workbench.ray_executor import run_on_ray

                run_on_ray(
                    todo, out_dir, root, suite.delta, streams, device, address, jobs, progress
                )
            elif executor == "process" and jobs > 1 and len(todo) > 1:
                _run_in_processes(todo, out_dir, root, suite.delta, streams, device, jobs, progress)
            else:
                for cell, pending in todo:
                    stage = partial(progress.stage, cell.label)
                    _cell_task(
                        out_dir,
                        cell,
                        pending,
                        root,
                        suite.delta,
                        streams,
                        device,
                        None,
                        jobs,
                        stage,
                    )
                    progress.finished(cell.label)
        return RunSummary(Path(out_dir), len(cells), len(todo), len(cells) - len(todo))


class Progress:
    """The suite's progress bar: cells done of pending, elapsed and ETA, and what is running
    (the serial executor names the cell's stage: partition, train, each attack)."""

    def __init__(self, total: int, name: str, quiet: bool) -> None:
        self.bar = tqdm(
            total=total,
            disable=quiet,
            desc=name,
            unit="cell",
            bar_format="{desc}: {n}/{total} cells |{bar:20}| {elapsed}<{remaining}{postfix}",
        )

    def stage(self, label: str, stage: str) -> None:
        self.bar.set_postfix_str(f"{label}: {stage}")

    def finished(self, label: str, running: int = 0) -> None:
        busy = f", {running} running" if running else ""
        self.bar.set_postfix_str(f"done: {label}{busy}", refresh=False)
        self.bar.update()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


def _run_in_processes(
    todo: Pending,
    out_dir: str | Path,
    root: str | None,
    delta: float,
    streams: Streams,
    device: str,
    jobs: int,
    progress: Progress,
) -> None:
    context = multiprocessing.get_context("spawn")  # fork with live OpenMP pools can hang
    # the parent's cores shared out: oversubscribed OpenMP pools slow every worker ~15×
    threads = max(1, torch.get_num_threads() // jobs)
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = {
            pool.submit(_cell_task, out_dir, c, p, root, delta, streams, device, threads): c
            for c, p in todo
        }
        for done, future in enumerate(as_completed(futures), start=1):
            future.result()
            progress.finished(futures[future].label, min(jobs, len(futures) - done))


_DATASETS: dict[str, Dataset] = {}  # per process: a worker loads each dataset once


def dataset_key(cell: Cell, data_root: str | None) -> str:
    return config_hash([cell.dataset.model_dump(), data_root])


def cell_dataset(cell: Cell, data_root: str | None, device: torch.device) -> Dataset:
    """The cell's dataset on ``device``, loaded and moved once per process."""
    key = f"{dataset_key(cell, data_root)}@{device}"
    if key not in _DATASETS:
        loaded = load_dataset(cell.dataset.name, cell.dataset.params, data_root)
        _DATASETS[key] = to_device(loaded, device)
    return _DATASETS[key]


def _cell_task(
    out_dir: str | Path,
    cell: Cell,
    pending: list[AttackEntry],
    data_root: str | None,
    delta: float,
    streams: Streams,
    device: str,
    threads: int | None,
    jobs: int = 1,
    on_stage: Callable[[str], None] | None = None,
) -> None:
    """One cell, start to finish, on ``device``, with its own connection to the store."""
    if threads is not None:
        torch.set_num_threads(threads)
    where = torch.device(device)
    dataset = cell_dataset(cell, data_root, where)
    store = ResultsStore(out_dir)
    try:
        with on_device(where):
            run_cell(cell, pending, dataset, store, streams, delta, jobs, on_stage=on_stage)
    finally:
        store.close()


@dataclass(frozen=True)
class Partitioned:
    """A cell's partition and the seconds it took: cells that differ only in their target
    share it (the Ray executor computes it once)."""

    partition: Partition
    seconds: float


def partition_cell(cell: Cell, dataset: Dataset, streams: Streams) -> Partitioned:
    p = cell.partition
    start = time.perf_counter()
    partition = make_partition(
        dataset,
        p.method,
        p.num_clients,
        streams.seed(cell.seed, "partition"),
        params=p.params,
        split=p.split,
        aux_fraction=p.aux_fraction,
    )
    return Partitioned(partition, time.perf_counter() - start)


def run_cell(
    cell: Cell,
    attacks: list[AttackEntry],
    dataset: Dataset,
    store: ResultSink,
    streams: Streams,
    delta: float = 1e-5,
    jobs: int = 1,
    partitioned: Partitioned | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> None:
    """Trains the cell's target, stores its row, then runs and stores each attack."""
    report = on_stage or (lambda stage: None)
    report("partition")
    partitioned = partitioned or partition_cell(cell, dataset, streams)
    partition = partitioned.partition
    federation = build_federation(dataset, partition)
    report("train")
    t1 = time.perf_counter()
    target = TARGETS.get(cell.target.name)
    defenses = [applied(d.name, d.params) for d in cell.target.defenses]
    config = target.Config(**cell.target.params)
    trained = target.fit(federation, config, defenses, streams.seed(cell.seed, "target"))
    t2 = time.perf_counter()
    if "metric_rho" in trained.utility:  # metric-DP: ε at the evaluator's ρ, same δ
        rho = trained.utility["metric_rho"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OrderGridWarning)
            trained.utility["metric_epsilon"] = epsilon(
                trained.ledger.metric(), delta, rho=rho
            ).epsilon
    querier_epsilon, epsilons = ledger_epsilons(trained.ledger, delta)
    audits = ()
    if auditable(cell):
        report("canary audit")
        audits = canary_audit(cell, trained, defenses, delta, streams)
    row = CellRow(
        cell.cell_id,
        cell.label,
        cell.config(),
        trained.utility,
        communication(trained),
        [vars(s) for s in partition.stats(dataset)],
        querier_epsilon,
        partitioned.seconds,
        t2 - t1,
        epsilons,
        audits,
    )
    with contextlib.suppress(SnapshotError):  # a payload kept as no plain data: not stored
        store.save_target(cell.cell_id, snapshot(trained, cell.keep_secrets))
    store.put_cell(row, config_hash(cell.config()))
    attack_cell(cell, attacks, trained, federation, store, streams, delta, jobs, report)


def auditable(cell: Cell) -> bool:
    """The suite asks for the canary audit and the cell has a DP defense it has a game for."""
    return bool(cell.canaries) and any(d.name in GAMES for d in cell.target.defenses)


def canary_audit(
    cell: Cell, trained: TrainedTarget, defenses: list, delta: float, streams: Streams
) -> tuple[dict[str, Any], ...]:
    """The canary audit of every DP mechanism the cell ran, at its parameters, as store rows."""
    results = audit_run(
        context_of(trained, defenses),
        defenses,
        delta,
        cell.canaries,
        streams.seed(cell.seed, "canary-audit"),
    )
    return tuple(
        {
            "defense": a.defense,
            "adversaries": "/".join(a.adversaries),
            "unit": a.unit,
            "mechanism": a.mechanism,
            "claimed": a.claimed,
            "lower_bound": a.lower_bound,
            "confidence": a.bound.confidence,
            "delta": a.bound.delta,
            "canaries": a.bound.canaries,
            "guesses": a.bound.guesses,
            "correct": a.bound.correct,
            "seconds": a.seconds,
        }
        for a in results
    )


def attack_cell(
    cell: Cell,
    attacks: list[AttackEntry],
    trained: TrainedTarget,
    federation: Federation,
    store: ResultSink,
    streams: Streams,
    delta: float,
    jobs: int,
    report: Callable[[str], None],
) -> None:
    """Runs and stores each attack against a trained cell (just trained, or restored)."""
    if not attacks:
        return
    seeds = partial(streams.seed, cell.seed)
    knowledge = background_knowledge(federation, trained)
    with ReferencePool(jobs, seeds("references")) as pool:
        inputs = CellInputs(trained, federation, knowledge, pool, seeds, delta)
        for entry in attacks:
            report(f"attack {entry.key}")
            row, row_hash = run_attack(cell, entry, inputs, store)
            store.put_attack(row, row_hash)


def attack_stored(
    out_dir: str | Path,
    attacks: list[AttackEntry],
    data_root: str | None = None,
    jobs: int = 1,
    quiet: bool = True,
    device: str = "auto",
) -> tuple[int, int]:
    """Runs ``attacks`` against every trained target a results folder stored, without
    retraining: the cell's federation is rebuilt from its seed, the target read back from
    its snapshot (``weights_only``). Attacks stored already are skipped. Returns (cells
    attacked, cells without a snapshot)."""
    with writing(out_dir, create=False), reading_untrusted(f"the results folder {out_dir}"):
        return _attack_stored(out_dir, attacks, data_root, jobs, quiet, device)


def _attack_stored(
    out_dir: str | Path,
    attacks: list[AttackEntry],
    data_root: str | None,
    jobs: int,
    quiet: bool,
    device: str,
) -> tuple[int, int]:
    where = resolve_device(device)
    store = ResultsStore(out_dir, create=False)
    try:
        raw = store.meta("suite_json")
        if raw is None:
            raise ConfigError(f"{out_dir}: not a results folder (no suite recorded)")
        suite = Suite.model_validate_json(raw)
        streams = store.streams()
        cells = {c.cell_id: c for c in expand(suite)}
        attacked = missing = 0
        for row in store.cells():
            cell, path = cells.get(row.cell_id), store.target_path(row.cell_id)
            if cell is None or not path.exists():
                missing += 1
                continue
            pending = [a for a in attacks if a.key not in store.done_attacks(cell.cell_id)]
            if not pending:
                continue
            dataset = cell_dataset(cell, data_root, where)
            if not quiet:
                print(f"attacking {cell.label}: {', '.join(a.key for a in pending)}")
            with on_device(where):
                partitioned = partition_cell(cell, dataset, streams)
                federation = build_federation(dataset, partitioned.partition)
                trained = restore(path, federation)
                attack_cell(
                    cell,
                    pending,
                    trained,
                    federation,
                    store,
                    streams,
                    suite.delta,
                    jobs,
                    lambda stage: None,
                )
            attacked += 1
        return attacked, missing
    finally:
        store.close()


def ledger_epsilons(
    ledger: PrivacyLedger, delta: float
) -> tuple[float | None, tuple[dict[str, Any], ...]]:
    """(the querier's ε at the coarsest unit the events state, ε per adversary × unit); None
    and no rows when nothing was made DP."""
    if ledger.standard().is_empty:
        return None, ()
    rows = tuple(vars(r) for r in epsilons_by_adversary(ledger, delta))
    querier = [r["epsilon"] for r in rows if r["adversary"] == "querier"]
    return (querier[0] if querier else None), rows


def communication(trained: TrainedTarget) -> dict[str, Any]:
    msgs = trained.transcript.messages
    kinds: dict[str, int] = {}
    for m in msgs:
        kinds[m.kind] = kinds.get(m.kind, 0) + m.nbytes
    return {
        "bytes": trained.transcript.total_bytes(),
        "messages": len(msgs),
        "rounds": len({m.round for m in msgs}),
        "bytes_by_kind": kinds,
    }


def run_attack(
    cell: Cell, entry: AttackEntry, inputs: CellInputs, store: ResultSink
) -> tuple[AttackRow, str]:
    """One attack against a trained cell; only the family's candidates reach the attack, the
    truth stays with the scorer."""
    attack = ATTACKS.get(entry.name)
    cfg = attack.Config(**entry.params)
    row_hash = config_hash({"cell": cell.config(), "attack": entry.model_dump()})
    start = time.perf_counter()
    seed = inputs.seeds("attack", entry.key)
    seed_everything(seed)
    try:
        family = FAMILIES[attack.family].inputs(attack, cfg, inputs)
        inp = AttackInput(family.view, family.knowledge, family.candidates, family.references)
        if isolated(entry.name):
            out = run_isolated(entry.name, inp, cfg, seed)
        else:
            out = attack.run(inp, cfg, seed)
    except NotApplicableError as exc:
        row = AttackRow(
            cell.cell_id,
            entry.key,
            entry.name,
            entry.params,
            "not_applicable",
            str(exc),
            None,
            None,
            time.perf_counter() - start,
        )
        return row, row_hash
    seconds = time.perf_counter() - start
    metrics, curve = family.score(out)
    # what the attack counted without ground truth (e.g. generators recovered), kept beside
    metrics.update({f"attack_{k}": float(v) for k, v in out.details.get("counts", {}).items()})
    artifact = (
        None if curve is None else store.save_roc(cell.cell_id, entry.key, curve.fpr, curve.tpr)
    )
    row = AttackRow(
        cell.cell_id, entry.key, entry.name, entry.params, "ok", None, metrics, artifact, seconds
    )
    return row, row_hash
