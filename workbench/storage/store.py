"""The results store: one SQLite file per output folder.

A ``cells`` row per trained cell (config, utility, communication, partition statistics, ε,
timings, its training history per round), its ``epsilons`` per adversary × unit and its
canary ``audits`` (lower bound vs claimed ε), and an ``attacks`` row per cell × attack
(metrics or the not-applicable reason).
Each row is committed as soon as it exists, in WAL mode, so a crash mid-suite loses only the
cell in flight and a re-run skips what is finished. ROC arrays go to ``artifacts/``."""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from fgl_workbench.accountants.scope import UNITS
from fgl_workbench.errors import ConfigError
from fgl_workbench.npz import NpzError, checked_arrays, read_bounded
from fgl_workbench.seeding import Streams
from fgl_workbench.storage import rows as checks
from fgl_workbench.storage.records import (
    ScoredRecords,
    read_records,
    records_artifact,
    write_records,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    cell_id TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    config_json TEXT NOT NULL,
    utility_json TEXT NOT NULL,
    comm_json TEXT NOT NULL,
    partition_json TEXT NOT NULL,
    epsilon REAL,
    seconds_partition REAL NOT NULL,
    seconds_train REAL NOT NULL,
    created REAL NOT NULL,
    history_json TEXT
);
CREATE TABLE IF NOT EXISTS attacks (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    attack_key TEXT NOT NULL,
    attack TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    params_json TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'not_applicable')),
    reason TEXT,
    metrics_json TEXT,
    artifact TEXT,
    seconds REAL NOT NULL,
    created REAL NOT NULL,
    fence TEXT,
    PRIMARY KEY (cell_id, attack_key)
);
CREATE TABLE IF NOT EXISTS epsilons (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    adversary TEXT NOT NULL,
    unit TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    note TEXT NOT NULL,
    epsilon_pld REAL,
    PRIMARY KEY (cell_id, adversary, unit)
);
CREATE TABLE IF NOT EXISTS metric_epsilons (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    adversary TEXT NOT NULL,
    unit TEXT NOT NULL,
    rho REAL NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    note TEXT NOT NULL,
    PRIMARY KEY (cell_id, adversary, unit)
);
CREATE TABLE IF NOT EXISTS audits (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    defense TEXT NOT NULL,
    adversaries TEXT NOT NULL,
    unit TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    claimed REAL NOT NULL,
    lower_bound REAL NOT NULL,
    confidence REAL NOT NULL,
    delta REAL NOT NULL,
    canaries INTEGER NOT NULL,
    guesses INTEGER NOT NULL,
    correct INTEGER NOT NULL,
    seconds REAL NOT NULL,
    ceiling REAL,
    fdp_epsilon REAL,
    mu REAL,
    mu_ceiling REAL,
    holds INTEGER
);
"""
# the utility key the calibrated σ is stored under (beside metric-DP's ε and the IB's KL); the
# runner writes it, the report reads it
CALIBRATED_SIGMA = "calibrated_noise_multiplier"
AUDIT_COLUMNS = (
    "defense",
    "adversaries",
    "unit",
    "mechanism",
    "claimed",
    "lower_bound",
    "confidence",
    "delta",
    "canaries",
    "guesses",
    "correct",
    "seconds",
    "ceiling",
    "fdp_epsilon",
    "mu",
    "mu_ceiling",
    "holds",
)


# columns added after folders were written with their tables: read as NULL there
ADDED = {
    "cells": {"history_json": "TEXT"},
    "attacks": {"fence": "TEXT"},
    "epsilons": {"epsilon_pld": "REAL"},
    "audits": {
        "ceiling": "REAL",
        "fdp_epsilon": "REAL",
        "mu": "REAL",
        "mu_ceiling": "REAL",
        "holds": "INTEGER",
    },
}

EPSILON_COLUMNS = ("adversary", "unit", "epsilon", "delta", "note", "epsilon_pld")
METRIC_COLUMNS = ("adversary", "unit", "rho", "epsilon", "delta", "note")

STORE_FILE = "results.sqlite"
# meta key of a folder whose cells are models trained outside the workbench (``fgl_workbench.
# external``): no snapshot a reader could restore, so attacks are added by auditing again
EXTERNAL = "external"
ROC_CAP = 4_000_000  # points of one stored ROC curve (32 MB per array)
ROC_BYTES = 2 * ROC_CAP * 8 + 4096  # both arrays with their headers
LOCK_FILE = ".writing"


# SQLite's virtual-machine steps a reader may spend, counted in blocks of READ_BLOCK: about a
# hundred times what reading a store of 10 000 cells takes, so only a crafted database stops
READ_BLOCK, READ_BLOCKS = 100_000, 20_000


def _connect(path: Path, read_only: bool) -> sqlite3.Connection:
    """A connection to the results database, waiting for the lock while cell workers of the
    process executor write concurrently. Read-only, it changes nothing beside the file:
    without a writer's ``-wal`` file beside it, it is opened immutable (SQLite would create
    ``-wal`` and ``-shm`` files for a database in WAL mode otherwise), and its queries are
    given up on after ``READ_BLOCKS`` blocks of steps."""
    wal = path.with_name(path.name + "-wal")
    address = f"{path.absolute().as_uri()}?mode=ro" + ("" if wal.exists() else "&immutable=1")
    try:
        db = sqlite3.connect(address if read_only else str(path), timeout=60, uri=read_only)
    except sqlite3.Error as exc:
        raise ConfigError(f"{path}: cannot be opened ({exc})") from None
    if read_only:
        blocks = iter(range(READ_BLOCKS))
        db.set_progress_handler(lambda: next(blocks, None) is None, READ_BLOCK)
    return db


def expected_schema() -> dict[str, list[str]]:
    """Each table's columns as ``SCHEMA`` creates them."""
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    tables = {t: [str(c[1]) for c in db.execute(f"PRAGMA table_info({t})")] for t in names}
    db.close()
    return tables


def check_schema(db: sqlite3.Connection, path: Path) -> None:
    """The database holds the store's tables with their columns and nothing else: no view
    (a recursive one hangs any query), no trigger, no index of its own, no generated or
    unknown column. Only the columns of ``ADDED`` may be missing (an older folder)."""
    expected = expected_schema()
    try:
        found = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
        for kind, name, table, sql in found:  # SQLite's names are case-insensitive
            name, table = str(name).lower(), str(table).lower()
            automatic = kind == "index" and name.startswith(f"sqlite_autoindex_{table}_")
            plain = kind == "table" and name in expected and str(sql).startswith("CREATE TABLE")
            if not (automatic or plain):
                raise ConfigError(f"{path}: holds the {kind} {name[:40]!r}, not a store's")
        tables = {str(name).lower() for kind, name, *_ in found if kind == "table"}
        for table in expected:
            if table not in tables:
                raise ConfigError(f"{path}: the table {table} is missing")
            columns = db.execute(f"PRAGMA table_xinfo({table})").fetchall()
            names = [str(c[1]).lower() for c in columns]
            wanted = [c for c in expected[table] if c not in ADDED.get(table, {})]
            if any(c[6] != 0 for c in columns) or not set(wanted) <= set(names) <= set(
                expected[table]
            ):
                raise ConfigError(
                    f"{path}: table {table} has the columns {', '.join(names)[:200]}; "
                    f"expected {', '.join(expected[table])}"
                )
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{path}: not a results database ({_why(exc)})") from None


def _why(exc: sqlite3.Error) -> str:
    """SQLite's reason, or the reader's budget where that stopped the query."""
    if "interrupted" in str(exc):
        return f"a query past {READ_BLOCK * READ_BLOCKS:.0e} SQLite steps, 100× a store's"
    return str(exc)


@dataclass(frozen=True)
class CellRow:
    cell_id: str
    label: str
    config: dict[str, Any]
    utility: dict[str, Any]
    comm: dict[str, Any]
    partition: list[dict[str, Any]]
    epsilon: float | None  # the querier's, at the coarsest unit any event states
    seconds_partition: float
    seconds_train: float
    # per adversary × unit: {adversary, unit, epsilon, delta, note, epsilon_pld} (∞ where
    # unprotected; epsilon is the RDP figure, epsilon_pld the PLD one or None)
    epsilons: tuple[dict[str, Any], ...] = ()
    # the canary audit's rows (AUDIT_COLUMNS): lower bound vs claimed ε per claim audited
    audits: tuple[dict[str, Any], ...] = ()
    # metric-DP's ε(ρ) per adversary × unit (METRIC_COLUMNS; ∞ where unprotected)
    metric_epsilons: tuple[dict[str, Any], ...] = ()
    # per training round: {round, <what the target measured>} (TrainedTarget.history); empty
    # in folders written before it was stored
    history: tuple[dict[str, Any], ...] = ()

    def querier_row(self, metric: bool = False) -> dict[str, Any] | None:
        """The querier's ε row at the coarsest unit its events state (``epsilon`` is its
        value), or metric-DP's ε(ρ) row with ``metric``; None when the run states none: what
        one ε per configuration means wherever one is shown, named by adversary and unit."""
        rows = [
            e
            for e in (self.metric_epsilons if metric else self.epsilons)
            if e["adversary"] == "querier"
        ]
        return min(rows, key=lambda e: UNITS.index(e["unit"]), default=None)

    def epsilon_against(self, adversary: str, units: set[str] | frozenset[str]) -> float | None:
        """The smallest ε this cell states against ``adversary`` for any of ``units`` (each
        bounds the attack), None when the run states none."""
        found = [
            e["epsilon"]
            for e in self.epsilons
            if e["adversary"] == adversary and e["unit"] in units
        ]
        return min(found) if found else None


def metric_figure(row: dict[str, Any]) -> str:
    """A metric-DP row as every reader shows it (``epsilon --run``, the report): ``ε(ρ=0.147)
    = 3.1``, ∞ where that party is unprotected."""
    value = "∞" if not math.isfinite(row["epsilon"]) else f"{row['epsilon']:.3g}"
    return f"ε(ρ={row['rho']:.3g}) = {value}"


@dataclass(frozen=True)
class AttackRow:
    cell_id: str
    attack_key: str
    attack: str
    params: dict[str, Any]
    status: str
    reason: str | None
    metrics: dict[str, Any] | None
    artifact: str | None
    seconds: float
    # a plug-in's fence: "sandboxed (<mechanism>)" or "trusted without sandbox"; None: built in
    fence: str | None = None

    @property
    def label(self) -> str:
        """The attack with its parameters; a plug-in's row marked as such (``plugin_mark``)."""
        mark = "" if self.fence is None else f" [{plugin_mark(self.fence)}]"
        return attack_label(self.attack, self.params) + mark


TRUSTED_MARK, SANDBOXED_MARK = "plug-in, not sandboxed", "plug-in, sandboxed"


def plugin_mark(fence: str) -> str:
    """How a report marks a plug-in's row: fenced by the kernel, or trusted without."""
    return SANDBOXED_MARK if fence.startswith("sandboxed") else TRUSTED_MARK


def attack_label(name: str, params: dict[str, Any]) -> str:
    """Human-readable name: the attack with its parameters, e.g. ``mia-threshold(hops=2)``."""
    args = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"{name}({args})" if args else name


RUN_KEY = "run.key"
KEY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def target_file(cell_id: str) -> str:
    return f"targets/{cell_id}.pt"


def inside(root: Path, rel: str | Path) -> Path:
    """``root / rel``, refused when it would leave ``root``: an absolute or ``..`` path (read
    from a database someone else wrote), or a symbolic link on the way, which could redirect
    a read or a write onto the user's own files."""
    rel = Path(rel)
    if rel.is_absolute() or ".." in rel.parts:
        raise ConfigError(f"{root}: the stored path '{rel}' leaves the results folder")
    here = root
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            raise ConfigError(f"{here}: a symbolic link in the results folder; not followed")
    return here


@contextmanager
def written(root: Path, rel: str | Path) -> Iterator[BinaryIO]:
    """A file inside ``root`` written whole or not at all: into a temporary file beside it,
    renamed over it once complete. Never through a symbolic link (``inside``), and never
    onto a file with other hard links, whose other names would see the new content."""
    path = inside(root, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path = inside(root, rel)  # a folder made meanwhile is checked again
    if path.is_dir():
        raise ConfigError(f"{path}: a folder; expected a file to write")
    refuse_hard_link(path)
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be written ({exc.strerror})") from None
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            yield f
        refuse_hard_link(path)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def refuse_hard_link(path: Path) -> None:
    """An existing ``path`` with more than one name (a hard link planted in a received
    folder) is refused, like a symbolic link."""
    try:
        links = os.lstat(path).st_nlink
    except FileNotFoundError:
        return
    if links > 1:
        raise ConfigError(f"{path}: has {links} hard links; not written through")


class ResultsStore:
    def __init__(self, out_dir: str | Path, create: bool = True, read_only: bool = False) -> None:
        """``create``: make the folder and an empty store if absent (a run); else the folder
        must be a results folder already (reading, attacking later). ``read_only``: a reader
        (report, export, ``epsilon --run``), which opens the database read-only and never
        changes it; either way an existing database's schema is checked first."""
        self.root = Path(out_dir)
        self.path = self.root / STORE_FILE
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"--out {self.root}: a file, not a folder")
        if self.path.is_symlink():
            raise ConfigError(f"{self.path}: a symbolic link in the results folder; not followed")
        if (read_only or not create) and not self.path.is_file():
            raise ConfigError(f"{self.root}: not a results folder (no {STORE_FILE})")
        if read_only:
            self._db = _connect(self.path, read_only=True)
            check_schema(self._db, self.path)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self._db = _connect(self.path, read_only=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)  # the tables an older folder lacks
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{self.path}: not a results database ({exc})") from None
        check_schema(self._db, self.path)

    def _missing(self, table: str) -> list[str]:
        """The columns of ``ADDED`` that ``table`` lacks: a folder written before they
        existed, which reading must not change (an older version may still write there)."""
        try:
            found = self._db.execute(f"PRAGMA table_info({table})").fetchall()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{self.path}: not a results database ({exc})") from None
        names = {str(c[1]).lower() for c in found}
        return [c for c in ADDED.get(table, {}) if c not in names]

    def _add_columns(self, table: str) -> None:
        """Written into an older folder: the columns are added, empty (NULL) for its rows. A
        second writer adding them meanwhile is fine; anything else is a clear error."""
        for column in self._missing(table):
            try:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {ADDED[table][column]}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise ConfigError(
                        f"{self.path}: cannot add to its {table} table ({exc})"
                    ) from None

    def _read(self, table: str, columns: Sequence[str]) -> str:
        """``columns`` to select from ``table``, NULL for those an older folder lacks."""
        missing = set(self._missing(table))
        return ", ".join(f"NULL AS {c}" if c in missing else c for c in columns)

    def close(self) -> None:
        self._db.close()

    def set_meta(self, key: str, value: str) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def meta(self, key: str) -> str | None:
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: cannot be read ({exc})") from None
        if row is not None and not (isinstance(row[0], str) and len(row[0]) <= checks.JSON_CAP):
            raise ConfigError(f"{self.path}: meta row {key!r}, field value: expected text")
        return row[0] if row else None

    def suite(self) -> dict[str, Any]:
        """The suite this folder records, as plain data ({} where none is)."""
        where = f"{checks.row_name(self.path, 'meta', 'suite_json')}, field value"
        return checks.parsed_json(self.meta("suite_json") or "{}", checks.StoredSuite, where)

    def streams(self, reproducible: bool | None = None) -> Streams:
        """The folder's run key: made on the first run (OS entropy, kept in ``run.key``,
        readable by the owner only and never in the database; none when ``reproducible``)
        and reused, so a resumed suite draws the same streams. ``None``: read it (offline
        attacks), never make one."""
        marked = self.meta("reproducible")
        if marked is None:
            if reproducible is None or self.meta("suite_json") is not None:
                raise ConfigError(
                    f"{self.root}: no run key stored (a folder from an older version, whose "
                    "streams derived from the public seed); run the suite into a new --out"
                )
            made = Streams.public() if reproducible else Streams.fresh()
            if not reproducible:
                fd = os.open(inside(self.root, RUN_KEY), KEY_FLAGS, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(made.key)
            self.set_meta("reproducible", str(int(reproducible)))
            return made
        if reproducible is not None and marked != str(int(reproducible)):
            raise ConfigError(
                f"reproducible: {self.root} was made with reproducible: {marked == '1'}, the "
                f"suite says {reproducible}; run it into a new --out"
            )
        if marked == "1":
            return Streams.public()
        path = inside(self.root, RUN_KEY)
        if not path.is_file():
            raise ConfigError(f"{path}: the folder's secret run key is missing")
        return Streams(path.read_bytes())

    def has_cell(self, cell_id: str) -> bool:
        q = "SELECT 1 FROM cells WHERE cell_id = ?"
        return self._db.execute(q, (cell_id,)).fetchone() is not None

    def has_audit(self, cell_id: str) -> bool:
        q = "SELECT 1 FROM audits WHERE cell_id = ?"
        return self._db.execute(q, (cell_id,)).fetchone() is not None

    def done_attacks(self, cell_id: str) -> set[str]:
        rows = self._db.execute("SELECT attack_key FROM attacks WHERE cell_id = ?", (cell_id,))
        return {r[0] for r in rows}

    def put_cell(self, row: CellRow, config_hash: str) -> None:
        self._add_columns("cells")
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO cells (cell_id, label, config_hash, config_json, "
                "utility_json, comm_json, partition_json, epsilon, seconds_partition, "
                "seconds_train, created, history_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.cell_id,
                    row.label,
                    config_hash,
                    _dump(row.config),
                    _dump(row.utility),
                    _dump(row.comm),
                    _dump(row.partition),
                    row.epsilon,
                    row.seconds_partition,
                    row.seconds_train,
                    time.time(),
                    _dump(row.history),
                ),
            )
            self._db.execute("DELETE FROM epsilons WHERE cell_id = ?", (row.cell_id,))
            self._add_columns("epsilons")
            self._db.executemany(
                f"INSERT INTO epsilons (cell_id, {', '.join(EPSILON_COLUMNS)}) "
                f"VALUES (?{',?' * len(EPSILON_COLUMNS)})",
                [(row.cell_id, *(e.get(k) for k in EPSILON_COLUMNS)) for e in row.epsilons],
            )
            self._db.execute("DELETE FROM metric_epsilons WHERE cell_id = ?", (row.cell_id,))
            self._db.executemany(
                f"INSERT INTO metric_epsilons VALUES (?{',?' * len(METRIC_COLUMNS)})",
                [(row.cell_id, *(e[k] for k in METRIC_COLUMNS)) for e in row.metric_epsilons],
            )
            self._db.execute("DELETE FROM audits WHERE cell_id = ?", (row.cell_id,))
            self._add_columns("audits")
            self._db.executemany(
                f"INSERT INTO audits (cell_id, {', '.join(AUDIT_COLUMNS)}) "
                f"VALUES (?{',?' * len(AUDIT_COLUMNS)})",
                [(row.cell_id, *(a.get(k) for k in AUDIT_COLUMNS)) for a in row.audits],
            )

    def put_attack(self, row: AttackRow, config_hash: str) -> None:
        self._add_columns("attacks")
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO attacks (cell_id, attack_key, attack, config_hash, "
                "params_json, status, reason, metrics_json, artifact, seconds, created, fence) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.cell_id,
                    row.attack_key,
                    row.attack,
                    config_hash,
                    _dump(row.params),
                    row.status,
                    row.reason,
                    _dump(row.metrics) if row.metrics is not None else None,
                    row.artifact,
                    row.seconds,
                    time.time(),
                    row.fence,
                ),
            )

    def save_roc(self, cell_id: str, attack_key: str, fpr: np.ndarray, tpr: np.ndarray) -> str:
        rel = roc_artifact(cell_id, attack_key)
        with written(self.root, rel) as f:
            np.savez_compressed(f, fpr=fpr, tpr=tpr)
        return rel

    def save_records(self, cell_id: str, attack_key: str, records: ScoredRecords) -> None:
        with written(self.root, records_artifact(cell_id, attack_key)) as f:
            write_records(f, records)

    def load_records(self, cell_id: str, attack_key: str) -> ScoredRecords | None:
        """An attack row's per-record scores (``fgl_workbench.storage.records``), None where
        the row has none (not a membership attack, or stored before they were kept)."""
        path = inside(self.root, records_artifact(cell_id, attack_key))
        return read_records(path) if path.is_file() else None

    def load_roc(self, rel: str) -> tuple[np.ndarray, np.ndarray]:
        """A stored ROC curve; ``rel`` (read from the database) must stay in the folder, and
        the file must hold two 1-D float arrays of at most ``ROC_CAP`` points each (sizes
        checked before anything is decompressed)."""
        path = inside(self.root, rel)
        try:
            arrays = checked_arrays(read_bounded(path, ROC_BYTES), ROC_BYTES, {"fpr", "tpr"})
        except NpzError as exc:
            raise ConfigError(f"{path}: not a ROC curve ({exc})") from None
        fpr, tpr = arrays["fpr"], arrays["tpr"]
        for name, a in (("fpr", fpr), ("tpr", tpr)):
            if a.ndim != 1 or a.dtype.kind != "f" or a.shape != fpr.shape or a.size < 2:
                raise ConfigError(
                    f"{path}, field {name}: expected a 1-D float array of 2 or more points, "
                    "as long as fpr"
                )
            if not np.all((a >= 0) & (a <= 1)):
                raise ConfigError(f"{path}, field {name}: expected rates in [0, 1]")
        return fpr, tpr

    def save_target(self, cell_id: str, data: bytes) -> None:
        """A trained target's snapshot (fgl_workbench.storage.snapshot), for attacks run later."""
        with written(self.root, target_file(cell_id)) as f:
            f.write(data)

    def target_path(self, cell_id: str) -> Path:
        return inside(self.root, target_file(cell_id))

    def _rows(self, query: str) -> list[tuple]:
        """The rows ``query`` selects; a database that cannot answer it is one line."""
        try:
            return self._db.execute(query).fetchall()
        except sqlite3.Error as exc:
            raise ConfigError(f"{self.path}: cannot be read ({_why(exc)})") from None

    def _per_cell(
        self, table: str, columns: Sequence[str], model: type, order: str
    ) -> dict[str, list[dict[str, Any]]]:
        """``table``'s rows keyed by cell id, each checked by ``model``."""
        out: dict[str, list[dict[str, Any]]] = {}
        q = f"SELECT cell_id, {self._read(table, columns)} FROM {table} ORDER BY {order}"
        for r in self._rows(q):
            where = checks.row_name(self.path, table, r[0])
            row = checks.checked(model, dict(zip(columns, r[1:], strict=True)), where)
            out.setdefault(str(r[0]), []).append(row)
        return out

    def cells(self) -> list[CellRow]:
        q = (
            "SELECT cell_id, label, config_json, utility_json, comm_json, partition_json, "
            f"epsilon, seconds_partition, seconds_train, {self._read('cells', ['history_json'])} "
            "FROM cells ORDER BY label"
        )
        order = "cell_id, adversary, unit"
        eps = self._per_cell("epsilons", EPSILON_COLUMNS, checks.EpsilonRow, order)
        metric = self._per_cell("metric_epsilons", METRIC_COLUMNS, checks.MetricEpsilonRow, order)
        audits = self._per_cell("audits", AUDIT_COLUMNS, checks.AuditRow, "rowid")
        return [
            self._cell(r, eps.get(r[0], []), audits.get(r[0], []), metric.get(r[0], []))
            for r in self._rows(q)
        ]

    def _cell(self, r: tuple, eps: list, audits: list, metric: list) -> CellRow:
        """One ``cells`` row, every column and JSON field checked."""
        where = checks.row_name(self.path, "cells", r[0])
        names = ("cell_id", "label", "epsilon", "seconds_partition", "seconds_train")
        checks.checked(checks.CellColumns, dict(zip(names, (*r[:2], *r[6:9]), strict=True)), where)
        fields = zip(
            ("config_json", "utility_json", "comm_json", "partition_json"),
            (checks.CellConfig, checks.Utility, checks.Communication, checks.ClientStats),
            r[2:6],
            strict=True,
        )
        config, utility, comm, partition = (
            checks.parsed_json(text, model, f"{where}, field {name}", name == "partition_json")
            for name, model, text in fields
        )
        history = (
            []
            if r[9] is None  # a folder written before the history was stored
            else checks.parsed_json(r[9], checks.Round, f"{where}, field history_json", True)
        )
        return CellRow(
            r[0], r[1], config, utility, comm, partition, r[6], r[7], r[8],
            tuple(eps), tuple(audits), tuple(metric), tuple(history),
        )  # fmt: skip

    def config_hashes(self) -> dict[str, str]:
        """Each cell's full configuration hash (its id is the first 16 characters)."""
        return {str(k): str(v) for k, v in self._rows("SELECT cell_id, config_hash FROM cells")}

    def attacks(self) -> list[AttackRow]:
        q = (
            "SELECT cell_id, attack_key, attack, params_json, status, reason, metrics_json, "
            f"artifact, seconds, {self._read('attacks', ['fence'])} FROM attacks "
            "ORDER BY cell_id, attack_key"
        )
        return [self._attack(r) for r in self._rows(q)]

    def _attack(self, r: tuple) -> AttackRow:
        """One ``attacks`` row, every column and JSON field checked."""
        where = checks.row_name(self.path, "attacks", f"{r[0]}/{r[1]}")
        names = ("cell_id", "attack_key", "attack", "status", "reason", "artifact", "seconds")
        names += ("fence",)
        columns = (*r[:3], *r[4:6], *r[7:])
        checks.checked(checks.AttackColumns, dict(zip(names, columns, strict=True)), where)
        params = checks.parsed_json(r[3], None, f"{where}, field params_json")
        if not isinstance(params, dict):
            raise ConfigError(f"{where}, field params_json: expected a JSON object")
        metrics = (
            checks.parsed_json(r[6], checks.Metrics, f"{where}, field metrics_json")
            if r[6]
            else None
        )
        return AttackRow(r[0], r[1], r[2], params, r[4], r[5], metrics, r[7], r[8], r[9])


@contextmanager
def writing(out_dir: str | Path, create: bool = True) -> Iterator[None]:
    """Holds the results folder for one writer: a second run, audit or offline attack on the
    same folder is refused with the holder's pid instead of overwriting the stored suite
    under it. (Worker processes of this run write rows without taking it.) ``create`` as
    for ``ResultsStore``."""
    root = Path(out_dir)
    ResultsStore(root, create).close()  # the folder exists and is one
    try:  # never through a symlink a received folder may hold
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ConfigError(f"{root / LOCK_FILE}: cannot be opened safely ({exc.strerror})") from None
    with os.fdopen(fd, "r+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            raise ConfigError(
                f"{root}: {holder} is writing this results folder; wait for it to finish or "
                "use another --out"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"fgl-workbench pid {os.getpid()}")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def roc_artifact(cell_id: str, attack_key: str) -> str:
    """Where a ROC curve lives, relative to the results folder."""
    return str(Path("artifacts") / cell_id / f"{attack_key}.npz")


class ResultSink(Protocol):
    """Where a cell writes its rows: the store itself, or a buffer the driver writes later."""

    def put_cell(self, row: CellRow, config_hash: str) -> None: ...

    def put_attack(self, row: AttackRow, config_hash: str) -> None: ...

    def save_roc(self, cell_id: str, attack_key: str, fpr: np.ndarray, tpr: np.ndarray) -> str: ...

    def save_target(self, cell_id: str, data: bytes) -> None: ...

    def save_records(self, cell_id: str, attack_key: str, records: ScoredRecords) -> None: ...


@dataclass
class BufferedResults:
    """A cell's rows held in memory. A Ray worker may not share the driver's disk, so it
    returns these and the driver writes them (ROC files first, then the rows)."""

    cells: list[tuple[CellRow, str]] = field(default_factory=list)
    attacks: list[tuple[AttackRow, str]] = field(default_factory=list)
    rocs: list[tuple[str, str, np.ndarray, np.ndarray]] = field(default_factory=list)
    targets: list[tuple[str, bytes]] = field(default_factory=list)
    records: list[tuple[str, str, ScoredRecords]] = field(default_factory=list)

    def save_records(self, cell_id: str, attack_key: str, records: ScoredRecords) -> None:
        self.records.append((cell_id, attack_key, records))

    def save_target(self, cell_id: str, data: bytes) -> None:
        self.targets.append((cell_id, data))

    def put_cell(self, row: CellRow, config_hash: str) -> None:
        self.cells.append((row, config_hash))

    def put_attack(self, row: AttackRow, config_hash: str) -> None:
        self.attacks.append((row, config_hash))

    def save_roc(self, cell_id: str, attack_key: str, fpr: np.ndarray, tpr: np.ndarray) -> str:
        self.rocs.append((cell_id, attack_key, fpr, tpr))
        return roc_artifact(cell_id, attack_key)

    def write_to(self, store: ResultsStore) -> None:
        for target in self.targets:
            store.save_target(*target)
        for roc in self.rocs:
            store.save_roc(*roc)
        for records in self.records:
            store.save_records(*records)
        for row, config_hash in self.cells:
            store.put_cell(row, config_hash)
        for row, config_hash in self.attacks:
            store.put_attack(row, config_hash)


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=_jsonable)


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON-serialisable: {type(x).__name__}")
