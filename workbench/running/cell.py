"""One cell, start to finish: partition, train, account, audit, attack, store.

Every executor (``fgl_workbench.running.executors``) runs cells through ``run_job``; what differs
between them is only where and when, never a number."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from numbers import Real
from pathlib import Path
from typing import Any

import torch

from fgl_workbench.accountants import (
    PrivacyLedger,
    epsilons_by_adversary,
    metric_epsilons_by_adversary,
)
from fgl_workbench.adversary.threat import background_knowledge
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.families import FAMILIES
from fgl_workbench.attacks.family import CellInputs
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.attacks.plugins import trusting
from fgl_workbench.audits import GAMES, audit_run, context_of
from fgl_workbench.audits.stored import audit_row
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.datasets import Dataset, to_device
from fgl_workbench.data.federation import Federation, build_federation
from fgl_workbench.data.partition import Partition
from fgl_workbench.data.recipe import FederationRecipe
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.calibration import calibrating
from fgl_workbench.device import on_device
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.progress import listening_to_rounds, round_text
from fgl_workbench.running.calibration import calibrate_defenses, check_met
from fgl_workbench.running.isolated import isolated, run_isolated
from fgl_workbench.running.returned import ReturnError
from fgl_workbench.running.suite import AttackEntry, Cell, config_hash
from fgl_workbench.seeding import Streams, seed_everything
from fgl_workbench.storage.records import ScoredRecords
from fgl_workbench.storage.snapshot import SnapshotError, snapshot
from fgl_workbench.storage.store import (
    CALIBRATED_SIGMA,
    AttackRow,
    CellRow,
    ResultSink,
    ResultsStore,
    attack_label,
)
from fgl_workbench.targets import TARGETS, TrainedTarget
from fgl_workbench.targets.training import score_released
from fgl_workbench.thread_limits import intra_op


@dataclass(frozen=True)
class CellJob:
    """A pending cell and everything needed to run it anywhere (a worker process, a Ray
    node): plain data that pickles."""

    cell: Cell
    attacks: list[AttackEntry]
    data_root: str | None
    delta: float
    streams: Streams
    device: str  # resolved already ("cpu", "cuda:0")
    reference_jobs: int = 1  # worker processes for reference models (serial executor)


def run_job(
    job: CellJob,
    out_dir: str | Path,
    threads: int | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> None:
    """Runs one cell on its device with its own connection to the store; ``threads``: the
    intra-op threads it may use (its share of the cores)."""
    where = torch.device(job.device)
    dataset = cell_dataset(job.cell, job.data_root, where)
    store = ResultsStore(out_dir)
    try:
        with intra_op(threads or torch.get_num_threads()), on_device(where):
            run_cell(
                job.cell,
                job.attacks,
                dataset,
                store,
                job.streams,
                job.delta,
                job.reference_jobs,
                on_stage=on_stage,
            )
    finally:
        store.close()


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


@dataclass(frozen=True)
class Partitioned:
    """A cell's partition, how it was cut and the seconds it took: cells that differ only in
    their target share it (the Ray executor computes it once)."""

    partition: Partition
    seconds: float
    recipe: FederationRecipe | None = None


def cell_recipe(cell: Cell, streams: Streams) -> FederationRecipe:
    """The cell's federation as plain data: its dataset, partition and partition seed."""
    p = cell.partition
    return FederationRecipe(
        dataset=cell.dataset.name,
        dataset_params=cell.dataset.params,
        method=p.method,
        num_clients=p.num_clients,
        seed=streams.seed(cell.seed, "partition"),
        params=p.params,
        split=p.split,
        aux_fraction=p.aux_fraction,
        membership=p.membership,
    )


def partition_cell(cell: Cell, dataset: Dataset, streams: Streams) -> Partitioned:
    recipe = cell_recipe(cell, streams)
    start = time.perf_counter()
    partition = recipe.partition(dataset)
    return Partitioned(partition, time.perf_counter() - start, recipe)


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
    federation = build_federation(dataset, partition, partitioned.recipe)
    target = TARGETS.get(cell.target.name)
    config = target.Config(**cell.target.params)
    given = [applied(d.name, d.params) for d in cell.target.defenses]
    if calibrating(given):
        report("calibrate σ")
    # σ for a defense's target_epsilon, from the ledger the target will write: the target,
    # its recipe, snapshot and audit see that σ, never the target ε
    calibration = calibrate_defenses(target, federation, config, given, delta)
    defenses = calibration.defenses
    report("train")
    t1 = time.perf_counter()
    with listening_to_rounds(lambda k, total, v: report(f"train {round_text(k, total, v)}")):
        trained = target.fit(federation, config, defenses, streams.seed(cell.seed, "target"))
    t2 = time.perf_counter()
    if partition.membership == "inductive":
        inductive_release(trained, federation)
    if calibration.noise_multiplier is not None:
        trained.utility[CALIBRATED_SIGMA] = calibration.noise_multiplier
    querier_epsilon, epsilons = ledger_epsilons(trained.ledger, delta)
    metric = metric_rows(trained.ledger, delta, trained.utility.get("metric_rho"))
    check_met(calibration, epsilons)
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
        metric,
        stored_history(trained.history),
    )
    with contextlib.suppress(SnapshotError):  # a payload kept as no plain data: not stored
        store.save_target(cell.cell_id, snapshot(trained, cell.keep_secrets))
    store.put_cell(row, config_hash(cell.config()))
    attack_cell(cell, attacks, trained, federation, store, streams, delta, jobs, report)


def inductive_release(trained: TrainedTarget, federation: Federation) -> None:
    """What an inductive federation changes in a trained target, in place: its recipe says
    so (shadow and reference models then train inductively too), and its test utility, which
    its clients could not score (they hold no test nodes), is the released model's on the
    clients' test nodes answered on the population graph, a hop beyond the model's layers
    (the whole graph's answer, as inductive papers evaluate). A release of embeddings only
    (metric DP) answers no posteriors: its test utility stays unscored (NaN)."""
    trained.recipe = replace(trained.recipe, inductive=True)
    layers = getattr(getattr(trained.spec, "config", None), "layers", None) or 2
    pooled = trained.recipe.num_clients == 1  # centralised: scored as one client, as it scores
    with contextlib.suppress(NotApplicableError):
        trained.utility.update(score_released(trained.query, federation, layers + 1, pooled))


def stored_history(history: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The target's per-round history as the store keeps it: each round's numbers, the
    round's index where a target left it out; anything else (a plug-in's tensor or text) is
    left out rather than stop the cell."""
    return tuple(
        {"round": i} | {k: v for k, v in h.items() if _number(v)} for i, h in enumerate(history)
    )


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)  # numpy's too


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
    return tuple(audit_row(a) for a in results)


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
            report(f"attack {attack_label(entry.name, entry.params)}")
            row, row_hash = run_attack(cell, entry, inputs, store)
            store.put_attack(row, row_hash)


def ledger_epsilons(
    ledger: PrivacyLedger, delta: float
) -> tuple[float | None, tuple[dict[str, Any], ...]]:
    """(the querier's ε at the coarsest unit the events state, ε per adversary × unit, each
    with its PLD ε beside the RDP one); None and no rows when nothing was made DP."""
    if ledger.standard().is_empty:
        return None, ()
    rows = tuple(vars(r) for r in epsilons_by_adversary(ledger, delta, pld=True))
    querier = [r["epsilon"] for r in rows if r["adversary"] == "querier"]
    return (querier[0] if querier else None), rows


def metric_rows(
    ledger: PrivacyLedger, delta: float, rho: float | None
) -> tuple[dict[str, Any], ...]:
    """Metric-DP's ε(ρ) per adversary × unit at the evaluator's ρ and the cell's δ, each
    with ρ and its note; none when nothing was released under metric-DP (no ρ)."""
    if rho is None or ledger.metric().is_empty:
        return ()
    rows = metric_epsilons_by_adversary(ledger, delta, rho)
    return tuple({**vars(r), "rho": rho} for r in rows)


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


def _family_inputs(name: str, attack: Any, config: Any, inputs: CellInputs) -> Any:
    """The attack's view, knowledge, candidates and scorer from its family; a plug-in whose
    config lacks what its family reads (``source``, ``attribute``, ...) is one line."""
    try:
        return FAMILIES[attack.family].inputs(attack, config, inputs)
    except (NotApplicableError, ConfigError):
        raise
    except Exception as exc:
        if not isolated(name):
            raise
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise ReturnError(f"{name}: its config lacks what its family reads ({why})") from None


def run_attack(
    cell: Cell, entry: AttackEntry, inputs: CellInputs, store: ResultSink
) -> tuple[AttackRow, str]:
    """One attack against a trained cell; only the family's candidates reach the attack, the
    truth stays with the scorer."""
    with trusting(cell.trust_plugins):  # a plug-in is described by a fenced process
        attack = ATTACKS.get(entry.name)
        cfg = attack.Config(**entry.params)
    row_hash = config_hash({"cell": cell.config(), "attack": entry.model_dump()})
    start = time.perf_counter()
    seed = inputs.seeds("attack", entry.key)
    seed_everything(seed)
    fence = None  # built in: runs in this process
    try:
        family = _family_inputs(entry.name, attack, cfg, inputs)
        inp = AttackInput(family.view, family.knowledge, family.candidates, family.references)
        if isolated(entry.name):
            out, fence = run_isolated(entry.name, inp, cfg, seed, cell.trust_plugins)
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
            fence,
        )
        return row, row_hash
    seconds = time.perf_counter() - start
    try:
        metrics, curve = family.score(out)
    except Exception as exc:  # a plug-in's output that does not fit its family: one line
        if fence is None:
            raise
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise ReturnError(f"{entry.name}: its output cannot be scored ({why})") from None
    # what the attack counted without ground truth (e.g. generators recovered), kept beside
    metrics.update({f"attack_{k}": float(v) for k, v in out.details.get("counts", {}).items()})
    artifact = (
        None if curve is None else store.save_roc(cell.cell_id, entry.key, curve.fpr, curve.tpr)
    )
    if family.records is not None:
        store.save_records(cell.cell_id, entry.key, ScoredRecords(*family.records(out)))
    row = AttackRow(
        cell.cell_id,
        entry.key,
        entry.name,
        entry.params,
        "ok",
        None,
        metrics,
        artifact,
        seconds,
        fence,
    )
    return row, row_hash
