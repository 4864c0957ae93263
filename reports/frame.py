"""A results folder as one table: the form pandas, spreadsheets and plotting tools read.

One row per cell × attack (a cell no attack ran on keeps one row with the attack columns
empty). Columns, in this order:

- the cell: ``cell_id``, ``configuration`` (its label without the seed; sweep twins told
  apart by their settings, as in the report), ``dataset``, ``partition``, ``num_clients``,
  ``target``, ``defenses`` (``+``-joined; ``none`` for the undefended baseline, so
  ``groupby('defenses')`` keeps it), ``seed``;
- ``target.<param>`` and ``defense.<name>.<param>``: the parameters the suite set for the
  cell (nested ones dotted, ``target.model.hidden``; lists as JSON; empty where a cell did not
  set them, the target's default then applied);
- ``utility.<metric>`` for each utility metric (accuracy, macro-F1, ...);
- ``epsilon.<adversary>.<unit>`` for each ε the run states (the RDP accountant's) and
  ``epsilon_pld.<adversary>.<unit>`` beside each with a PLD form (dp_accounting's
  privacy-loss-distribution accountant: usually tighter); ``epsilon_metric.<adversary>.<unit>``
  for metric-DP's ε(ρ) (at the cell's ``utility.metric_rho``). Each is ``float('inf')`` where
  nothing is guaranteed: the party is unprotected, or the cell accounted nothing of that kind
  (the undefended baseline); empty only where a finite ε has no PLD form;
- the attack: ``attack``, ``attack_label`` (its name with its parameters), ``attack_key``
  (the store's key), ``attack_params`` (JSON), ``status``, ``reason``;
- ``metric.<name>`` for each attack metric (auc, auc_ci_low, tpr_at_1pct_fpr, ...).

Nested metrics (per-client lists, histograms) stay in the store and the report; the table
keeps the numbers.

``history_frame`` is the second table: one row per cell × training round, the cell columns
then ``round`` and what the target measured that round (``val_accuracy``, ``train_loss``:
the mean local training loss, ...)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from fgl_workbench.errors import ConfigError
from fgl_workbench.reports.summary import configurations
from fgl_workbench.storage.store import AttackRow, CellRow, ResultsStore, written

CELL_COLUMNS = [
    "cell_id",
    "configuration",
    "dataset",
    "partition",
    "num_clients",
    "target",
    "defenses",
    "seed",
]
NO_DEFENSE = "none"  # the undefended cells' ``defenses``
ATTACK_COLUMNS = [
    "attack",
    "attack_label",
    "attack_key",
    "attack_params",
    "status",
    "reason",
    "fence",
]


def results_frame(out: str | Path) -> pd.DataFrame:
    """The results folder ``out`` as a DataFrame (see the module docstring for its columns)."""
    store = ResultsStore(out, read_only=True)
    try:
        cells, attacks = store.cells(), store.attacks()
    finally:
        store.close()
    return frame(cells, attacks)


def frame(cells: list[CellRow], attacks: list[AttackRow]) -> pd.DataFrame:
    by_cell: dict[str, list[AttackRow]] = {}
    for a in attacks:
        by_cell.setdefault(a.cell_id, []).append(a)
    rows = []
    for c, base in _cells_in_order(cells):
        base = base | cell_numbers(c)
        rows += [{**base, **_attack_columns(a)} for a in by_cell.get(c.cell_id, [])] or [base]
    table = pd.DataFrame(rows)
    for name in CELL_COLUMNS + ATTACK_COLUMNS:
        if name not in table:
            table[name] = None
    _unbounded(table, cells)
    grouped = sorted(table.columns, key=_column_order)
    return table[grouped].reset_index(drop=True)


def history_frame(out: str | Path) -> pd.DataFrame:
    """The training history of the results folder ``out``: one row per cell × round (see the
    module docstring); cells stored before histories were have no rows."""
    store = ResultsStore(out, read_only=True)
    try:
        cells = store.cells()
    finally:
        store.close()
    return history(cells)


def history(cells: list[CellRow]) -> pd.DataFrame:
    rows = [{**base, **r} for c, base in _cells_in_order(cells) for r in c.history]
    settings = dict.fromkeys(k for c in cells for k in setting_columns(c.config))
    measured = dict.fromkeys(k for c in cells for r in c.history for k in r if k != "round")
    columns = [*CELL_COLUMNS, *sorted(settings, key=_column_order), "round", *measured]
    return pd.DataFrame(rows, columns=columns)


def _cells_in_order(cells: list[CellRow]) -> list[tuple[CellRow, dict[str, Any]]]:
    """Each cell with its cell and parameter columns, by configuration, then seed."""
    label = {c.cell_id: name for name, group in configurations(cells) for c in group}
    ordered = sorted(cells, key=lambda c: (label[c.cell_id], c.config["seed"]))
    return [(c, _cell_columns(c, label[c.cell_id])) for c in ordered]


def _cell_columns(c: CellRow, configuration: str) -> dict[str, Any]:
    config = c.config
    target = config["target"]
    out: dict[str, Any] = {
        "cell_id": c.cell_id,
        "configuration": configuration,
        "dataset": config["dataset"]["name"],
        "partition": config["partition"]["method"],
        "num_clients": config["partition"]["num_clients"],
        "target": target["name"],
        "defenses": "+".join(d["name"] for d in target.get("defenses") or []) or NO_DEFENSE,
        "seed": config["seed"],
    }
    return out | setting_columns(config)


def setting_columns(config: dict[str, Any]) -> dict[str, Any]:
    """The parameters the suite set for the cell's target (``target.<param>``) and each of
    its defenses (``defense.<name>.<param>``), nested mappings dotted, lists as JSON."""
    target = config["target"]
    out = _flat("target", target.get("params") or {})
    for d in target.get("defenses") or []:
        out |= _flat(f"defense.{d['name']}", d.get("params") or {})
    return out


def _flat(prefix: str, params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in params.items():
        key = f"{prefix}.{k}"
        if isinstance(v, dict):
            out |= _flat(key, v)
        else:
            out[key] = json.dumps(v, sort_keys=True) if isinstance(v, list) else v
    return out


def _unbounded(table: pd.DataFrame, cells: list[CellRow]) -> None:
    """∞ in the ε columns of cells that accounted nothing of that kind (the undefended
    baseline: no guarantee, which an empty cell would hide from ``groupby`` and ``min``), and
    in a PLD column where its RDP figure is ∞ (no PLD form is computed there)."""
    unaccounted = {
        "epsilon": {c.cell_id for c in cells if not c.epsilons},
        "epsilon_metric": {c.cell_id for c in cells if not c.metric_epsilons},
    }
    unaccounted["epsilon_pld"] = unaccounted["epsilon"]
    for name in list(table.columns):
        kind, _, key = name.partition(".")
        if kind not in unaccounted:
            continue
        rows = table.cell_id.isin(unaccounted[kind])
        if kind == "epsilon_pld" and f"epsilon.{key}" in table:
            rows |= table[f"epsilon.{key}"] == math.inf
        table.loc[rows, name] = math.inf


def cell_numbers(c: CellRow) -> dict[str, Any]:
    """The cell's numbers: ``utility.<metric>``, ``epsilon.<adversary>.<unit>`` (RDP; ∞ where
    nothing is guaranteed), ``epsilon_pld.<adversary>.<unit>`` (PLD, where it has one) and
    ``epsilon_metric.<adversary>.<unit>`` (metric-DP's ε(ρ))."""
    out = {f"utility.{k}": v for k, v in c.utility.items() if _is_number(v)}
    out |= {f"epsilon.{e['adversary']}.{e['unit']}": e["epsilon"] for e in c.epsilons}
    out |= {
        f"epsilon_pld.{e['adversary']}.{e['unit']}": e["epsilon_pld"]
        for e in c.epsilons
        if e.get("epsilon_pld") is not None
    }
    out |= {f"epsilon_metric.{e['adversary']}.{e['unit']}": e["epsilon"] for e in c.metric_epsilons}
    return out


def _attack_columns(a: AttackRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attack": a.attack,
        "attack_label": a.label,
        "attack_key": a.attack_key,
        "attack_params": json.dumps(a.params, sort_keys=True),
        "status": a.status,
        "reason": a.reason,
        "fence": a.fence,
    }
    return out | attack_numbers(a)


def attack_numbers(a: AttackRow) -> dict[str, Any]:
    """The attack's numeric metrics as ``metric.<name>`` (nested ones left out; None where
    the metric could not be measured)."""
    return {f"metric.{k}": v for k, v in (a.metrics or {}).items() if _is_number(v)}


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _column_order(name: str) -> tuple[int, int]:
    """Cell columns, target and defense parameters, utility, ε, attack columns, attack
    metrics; in first-seen order within."""
    if name in CELL_COLUMNS:
        return 0, CELL_COLUMNS.index(name)
    if name in ATTACK_COLUMNS:
        return 4, ATTACK_COLUMNS.index(name)
    groups = {
        "target": (1, 0),
        "defense": (1, 1),
        "utility": (2, 0),
        "epsilon": (3, 0),
        "epsilon_pld": (3, 0),
        "epsilon_metric": (3, 0),
        "metric": (5, 0),
    }
    return groups[name.split(".", 1)[0]]


FORMATS = ("csv", "parquet")
# what makes a spreadsheet read a CSV cell as a formula (``=HYPERLINK(...)``)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every text cell a spreadsheet would run as a formula prefixed by
    ``'`` (OWASP's CSV injection advice); numbers, negative ones too, stay numbers. Parquet
    keeps the text unchanged: its columns are typed, and no reader evaluates them."""
    return table.map(
        lambda v: f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v
    )


def export(out: str | Path, fmt: str, path: str | Path | None = None) -> Path:
    """Writes the results table of ``out`` as ``fmt`` (csv or parquet) to ``path``, default
    ``results.<fmt>`` inside the folder (never through a symbolic link); returns where."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format: expected one of {', '.join(FORMATS)}, got '{fmt}'")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(
            "--format parquet: needs pyarrow (pip install 'fgl-workbench[export]'), or use csv"
        )
    table = results_frame(out)
    root, rel = (
        (Path(out), f"results.{fmt}") if path is None else (Path(path).parent, Path(path).name)
    )
    with written(root, rel) as f:
        if fmt == "csv":
            # CRLF (RFC 4180): a carriage return inside a text cell is then quoted too
            spreadsheet_safe(table).to_csv(f, index=False, lineterminator="\r\n")
        else:
            table.to_parquet(f, index=False)
    return root / rel
