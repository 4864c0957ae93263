"""A results folder logged to MLflow (``--mlflow URI``): one MLflow run per trained cell.

The run is named after the cell's label and tagged ``fgl_workbench.cell_id``,
``fgl_workbench.results_folder`` and ``fgl_workbench.running.suite``; the experiment is the suite's
name unless one is given. It holds:

- params: the cell's configuration flattened (``dataset.name``, ``dataset.params.num_nodes``,
  ``partition.split``, ``target.params.rounds``, ``target.defenses.0.params.clip``, ``seed``,
  ...) and ``config_hash``; strings as they are, other values as JSON;
- metrics: every numeric utility value (``utility.<name>``), every ε
  (``epsilon.<adversary>.<unit>``, RDP; ``epsilon_pld.<adversary>.<unit>``, PLD;
  ``epsilon_metric.<adversary>.<unit>``, metric-DP's ε(ρ)) and every numeric attack metric
  (``<attack label>.<metric>``, e.g. ``mia-threshold_hops_2.auc``, ``....tpr_at_0.01``);
- per-round metrics: each number of the cell's training history (``history.train_loss``, the
  mean local training loss; ``history.val_accuracy``; ...) at step = its round, so MLflow
  draws the training curves;
- tags: ``<attack label>.label`` (the label as the report writes it) and, for an attack that
  did not apply, ``<attack label>.not_applicable`` with the reason;
- the artifact ``report.html``: the folder's HTML report (built first where the folder has
  none), the same file in every cell's run, replaced when logged again.

A value that is not a finite number (ε = ∞ where a party sees the data without noise, a NaN)
is not logged as a metric: MLflow's database and server stores do not all keep them, and a
large sentinel would be a false number. It becomes a tag of the same key instead
(``epsilon.server.client = inf``). A metric the attack could not measure (None) is left out.

Logging again (a resumed suite, attacks added later) finds the run by its cell id and results
folder and adds what is new or changed (a history already logged is not logged twice), so no
cell gets two runs; the same suite run into
another folder (other draws) gets runs of its own. Keys keep to letters, digits, ``_ - .``
(MLflow's portable set; '@' is written ``_at_``), within its 250 characters; param values
past MLflow's 6000 characters are cut (the config hash still names the whole configuration).

The folder is read through the store (JSON rows, nothing executed); mlflow is imported only
here, when ``--mlflow`` is given (``pip install 'fgl-workbench[mlflow]'``). MLflow 3 opens
its ``file:`` store only with ``MLFLOW_ALLOW_FILE_STORE=true`` (it is in maintenance mode);
``sqlite:///`` needs sqlalchemy and alembic beside mlflow-skinny (the full ``mlflow`` package
has them); ``http(s)://`` reaches a tracking server."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fgl_workbench.errors import ConfigError
from fgl_workbench.reports.frame import attack_numbers, cell_numbers
from fgl_workbench.storage.store import AttackRow, CellRow, ResultsStore, inside

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

CELL_TAG = "fgl_workbench.cell_id"
FOLDER_TAG = "fgl_workbench.results_folder"
SUITE_TAG = "fgl_workbench.running.suite"
KEY_LENGTH = 250  # MLflow's limit on param, metric and tag keys
PARAM_LENGTH = 6000  # on param values
TAG_LENGTH = 8000  # on tag values
BATCH = 50  # entries of each kind per log_batch: under MLflow's 100 and its 1 MB request
_OUTSIDE_KEY = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class Logged:
    """What one logging did: the experiment, and the cells' runs created and updated."""

    experiment: str
    created: int
    updated: int


def connect(uri: str) -> MlflowClient:
    """A client of the tracking store at ``uri``, opened before anything is trained, so a
    missing mlflow or a store it cannot open stops the command at once."""
    if not uri.strip():
        raise ConfigError(
            "--mlflow: expected a tracking URI (file:///..., sqlite:///..., http://...)"
        )
    try:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ConfigError(
            "--mlflow: MLflow is not installed; install the extra with "
            "`pip install 'fgl-workbench[mlflow]'`"
        ) from None
    try:
        return MlflowClient(tracking_uri=uri)
    except MlflowException as exc:
        raise ConfigError(f"--mlflow {uri}: {_explain(exc)}") from None


def _explain(exc: Exception) -> str:
    """MLflow's refusal in one line, with what to do for the local stores."""
    text = str(exc)
    if "MLFLOW_ALLOW_FILE_STORE" in text:
        return (
            "MLflow 3 opens its file store only with MLFLOW_ALLOW_FILE_STORE=true in the "
            "environment; set it, or use sqlite:///mlflow.db (needs sqlalchemy and alembic) or "
            "a tracking server (http://...)"
        )
    if "unsupported URI" in text:
        return (
            "this MLflow has no store for that scheme (sqlite:/// and other databases need "
            "sqlalchemy and alembic: pip install mlflow); file:/// and http(s):// need nothing more"
        )
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def log_results(out: str | Path, client: MlflowClient, experiment: str | None = None) -> Logged:
    """Logs every cell of the results folder ``out`` (see the module docstring)."""
    from mlflow.exceptions import MlflowException

    store = ResultsStore(out, read_only=True)
    try:
        cells, attacks = store.cells(), store.attacks()
        hashes, suite = store.config_hashes(), store.meta("suite_name")
    finally:
        store.close()
    if suite is None:
        raise ConfigError(f"{out}: not a results folder (no suite recorded)")
    name = suite if experiment is None else experiment
    if not name.strip():
        raise ConfigError("--mlflow-experiment: expected a name")
    folder = str(Path(out).resolve())
    by_cell: dict[str, list[AttackRow]] = {}
    for a in attacks:
        by_cell.setdefault(a.cell_id, []).append(a)
    report = report_file(out)
    created = 0
    try:
        experiment_id = _experiment(client, name)
        for c in cells:
            tags = {CELL_TAG: c.cell_id, FOLDER_TAG: folder, SUITE_TAG: suite}
            params = cell_params(c.config) | {"config_hash": hashes[c.cell_id]}
            metrics, extra = cell_values(c, by_cell.get(c.cell_id, []))
            run = _log_cell(client, experiment_id, c, params, metrics, tags | extra)
            client.log_artifact(run.run_id, str(report))
            client.set_terminated(run.run_id)
            created += run.created
    except MlflowException as exc:
        raise ConfigError(f"--mlflow {client.tracking_uri}: {_explain(exc)}") from None
    return Logged(name, created, len(cells) - created)


def report_file(out: str | Path) -> Path:
    """The folder's ``report.html``, built first where there is none (never through a
    symbolic link the folder holds)."""
    from fgl_workbench.reports.report import HTML_FILE, build_report

    path = inside(Path(out), HTML_FILE)
    return path if path.is_file() else build_report(out)


def round_values(c: CellRow) -> list[tuple[str, float, int]]:
    """The cell's training history as (key, value, step = round): every finite number of
    each round (a round whose validation nothing read holds NaN: not logged)."""
    return [
        (mlflow_key(f"history.{name}"), float(value), int(r["round"]))
        for r in c.history
        for name, value in r.items()
        if name != "round" and value is not None and math.isfinite(value)
    ]


def cell_params(config: dict[str, Any]) -> dict[str, str]:
    """The cell's configuration as MLflow params: nested mappings and lists of mappings (the
    defenses) flattened into dotted keys, every other value as one readable string."""
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                walk(f"{prefix}.{i}", v)
        else:
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            out[mlflow_key(prefix)] = _cut(text, PARAM_LENGTH)

    walk("", config)
    return out


def cell_values(c: CellRow, attacks: list[AttackRow]) -> tuple[dict[str, float], dict[str, str]]:
    """The cell's metrics, and the tags beside them: non-finite values, attack labels and
    not-applicable reasons."""
    numbers = dict(cell_numbers(c))
    tags: dict[str, str] = {}
    for a, prefix in zip(attacks, attack_prefixes(attacks), strict=True):
        tags[mlflow_key(f"{prefix}.label")] = a.label
        if a.status != "ok":
            tags[mlflow_key(f"{prefix}.not_applicable")] = a.reason or ""
        for name, value in attack_numbers(a).items():
            numbers[f"{prefix}.{name.removeprefix('metric.')}"] = value
    metrics: dict[str, float] = {}
    for name, value in numbers.items():
        if value is None:
            continue
        if math.isfinite(value):
            metrics[mlflow_key(name)] = float(value)
        else:
            tags[mlflow_key(name)] = str(float(value))  # inf, -inf, nan
    return metrics, tags


def attack_prefixes(attacks: list[AttackRow]) -> list[str]:
    """Each attack's key prefix: its label in MLflow's key set, or its store key where two of
    the cell's labels come out the same."""
    labels = [mlflow_key(a.label) for a in attacks]
    seen = Counter(labels)
    return [
        p if seen[p] == 1 else mlflow_key(a.attack_key)
        for a, p in zip(attacks, labels, strict=True)
    ]


def mlflow_key(text: str) -> str:
    """``text`` as a key MLflow takes on every store and system: runs of other characters as
    one ``_`` ('@' as ``_at_``); past 250 characters, cut and ended by a hash of the whole."""
    key = _OUTSIDE_KEY.sub("_", text.replace("@", "_at_")).strip("_") or "_"
    if len(key) <= KEY_LENGTH:
        return key
    return key[: KEY_LENGTH - 9] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _experiment(client: MlflowClient, name: str) -> str:
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name)
    if found.lifecycle_stage != "active":
        raise ConfigError(
            f"--mlflow-experiment: the experiment '{name}' is deleted in "
            f"{client.tracking_uri}; restore it or name another"
        )
    return found.experiment_id


def _find_run(client: MlflowClient, experiment_id: str, cell_id: str, folder: str) -> Any:
    """The run this cell of this folder was logged to before, or None. (Cell ids are hex,
    so they go into the filter; the folder, any text, is compared here.)"""
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{CELL_TAG}` = '{cell_id}'")
    mine = [r for r in runs if r.data.tags.get(FOLDER_TAG) == folder]
    return mine[0] if mine else None


@dataclass(frozen=True)
class CellRun:
    """The run a cell was logged into, and whether this logging made it."""

    run_id: str
    created: bool


def _log_cell(
    client: MlflowClient,
    experiment_id: str,
    cell: CellRow,
    params: dict[str, str],
    metrics: dict[str, float],
    tags: dict[str, str],
) -> CellRun:
    """Logs one cell into its run, made if the cell has none yet, adding what the run lacks
    or holds otherwise (params never change: a cell id fixes its configuration, and so its
    history), in batches within MLflow's limits."""
    from mlflow.entities import Metric, Param, RunTag

    run = _find_run(client, experiment_id, cell.cell_id, tags[FOLDER_TAG])
    if run is None:
        run_id = client.create_run(experiment_id, run_name=cell.label).info.run_id
        old_params, old_metrics, old_tags = {}, {}, {}
    else:
        run_id = run.info.run_id
        old_params, old_metrics, old_tags = run.data.params, run.data.metrics, run.data.tags
    now = int(time.time() * 1000)
    new_params = [Param(k, v) for k, v in params.items() if k not in old_params]
    new_metrics = [Metric(k, v, now, 0) for k, v in metrics.items() if old_metrics.get(k) != v]
    new_metrics += [
        Metric(k, v, now, step) for k, v, step in round_values(cell) if k not in old_metrics
    ]
    tags = {k: _cut(v, TAG_LENGTH) for k, v in tags.items()}
    new_tags = [RunTag(k, v) for k, v in tags.items() if old_tags.get(k) != v]
    for i in range(0, max(len(new_params), len(new_metrics), len(new_tags)), BATCH):
        client.log_batch(
            run_id,
            metrics=new_metrics[i : i + BATCH],
            params=new_params[i : i + BATCH],
            tags=new_tags[i : i + BATCH],
        )
    return CellRun(run_id, run is None)
