"""Crafted results folders, as a reviewer fuzzed them (issue 43: 23 tracebacks and hangs from
47 folders): malformed rows, wrong types, missing keys, views and triggers, non-database
files, bad ROC files and snapshots. Every reader (``report``'s, ``export``, ``epsilon --run``,
``attack`` on the folder) ends in a result or one line: no traceback, within a deadline,
within a memory bound."""

from __future__ import annotations

import json
import resource
import shutil
import signal
import sqlite3
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
import torch
from crafting import RECEIVED, plant_attack
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from fgl_workbench.interface.cli import main
from fgl_workbench.reports.report import report_content

SECONDS = 30  # per reader and example: a hang is a failure, not a stuck test run
MEMORY = 512 * 2**20  # growth of the process's peak resident memory over the whole test
FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)

TEXT_COLUMNS = {
    "cells": ["label", "config_json", "utility_json", "comm_json", "partition_json"],
    "attacks": ["params_json", "metrics_json", "reason", "artifact", "status", "attack"],
    "meta": ["value"],
}
NUMBER_COLUMNS = {"cells": ["epsilon", "seconds_train"], "attacks": ["seconds"]}
JSON_COLUMNS = ["config_json", "utility_json", "comm_json", "partition_json"]
SCHEMA_CHANGES = [
    "DROP TABLE attacks",
    "DROP TABLE cells; CREATE VIEW cells AS SELECT * FROM meta",
    "CREATE VIEW v AS SELECT 1",
    "CREATE TRIGGER t AFTER UPDATE ON meta BEGIN DELETE FROM cells; END",
    "CREATE INDEX i ON attacks (attack)",
    "ALTER TABLE attacks ADD COLUMN evil TEXT",
    "ALTER TABLE cells RENAME COLUMN label TO name",
    "ANALYZE",
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
cell_values = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.text(max_size=30),
    st.binary(max_size=30),
    json_values.map(json.dumps),
    st.sampled_from(["x" * 2_000_000, "[" * 50_000, "$\\frac{$", "=HYPERLINK(1)"]),
)


class Hung(Exception):
    pass


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Raises ``Hung`` in a reader still running after ``seconds``."""

    def hung(*_: object) -> None:
        raise Hung(f"a reader ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cli(*argv: str) -> Callable[[], None]:
    def run() -> None:
        err = StringIO()
        with redirect_stdout(StringIO()), redirect_stderr(err):
            status = main(list(argv))
        lines = err.getvalue().strip().splitlines()
        errors = [line for line in lines if line.startswith("error: ")]
        assert status == 0 or (status == 2 and len(errors) == 1), (status, err.getvalue())

    return run


def report_reader(folder: Path) -> Callable[[], None]:
    """The report's content (tables and figures), an error being one line."""

    def run() -> None:
        from fgl_workbench.errors import WorkbenchError

        try:
            report = report_content([folder])
        except WorkbenchError as exc:
            assert "\n" not in str(exc)
            return
        import matplotlib.pyplot as plt

        for fig in report.figures():
            plt.close(fig)

    return run


@contextmanager
def fresh_folder() -> Iterator[Path]:
    """A copy of the real folder for one example (a fixture would be shared by all)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "received"
        shutil.copytree(RECEIVED, folder)
        yield folder


@contextmanager
def bounded_memory() -> Iterator[None]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    yield
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < MEMORY, f"peak memory grew by {grown / 2**20:.0f} MiB"


def read_everything(folder: Path, readers: list[Callable[[], None]]) -> None:
    for reader in readers:
        started = time.monotonic()
        with deadline(SECONDS):
            reader()
        assert time.monotonic() - started < SECONDS


def database_readers(folder: Path) -> list[Callable[[], None]]:
    out = str(folder.parent / "out.csv")
    return [
        cli("export", str(folder), "--output", out),
        cli("epsilon", "--run", str(folder)),
        report_reader(folder),
    ]


@st.composite
def database_damage(draw: st.DrawFn) -> tuple[str, tuple]:
    """One change to the database: a column set to any value, a JSON field with a key
    dropped or retyped (``(column, (key, None or [value]))``), or the schema changed."""
    kind = draw(st.sampled_from(["column", "number", "json", "schema"]))
    if kind == "schema":
        return draw(st.sampled_from(SCHEMA_CHANGES)), ()
    if kind == "json":
        column = draw(st.sampled_from(JSON_COLUMNS))
        key = draw(st.sampled_from(["dataset", "seed", "bytes", "accuracy", 0]))
        return column, (key, draw(st.none() | json_values.map(lambda v: [v])))
    table = draw(st.sampled_from(sorted(TEXT_COLUMNS)))
    columns = (TEXT_COLUMNS if kind == "column" else NUMBER_COLUMNS).get(table, ["value"])
    column = draw(st.sampled_from(columns))
    return f"UPDATE {table} SET {column} = ?", (draw(cell_values),)


@settings(FUZZ, max_examples=30)
@given(damage=database_damage())
def test_crafted_databases_read_as_a_result_or_one_line(damage):
    with fresh_folder() as received:
        damaged_database(received, damage)
        with bounded_memory():
            read_everything(received, database_readers(received))


def retyped(value: Any, key: str | int, new: list | None) -> Any:
    """``value`` with ``key`` dropped (``new`` None) or set to ``new[0]``, where it fits."""
    fits = isinstance(value, dict) and isinstance(key, str)
    fits = fits or (isinstance(value, list) and bool(value) and isinstance(key, int))
    if not fits:
        return value
    if new is not None:
        value[key] = new[0]
    elif isinstance(value, dict):
        value.pop(key, None)
    else:
        del value[key]
    return value


def damaged_database(received: Path, damage: tuple[str, tuple]) -> None:
    plant_attack(received, {"hops": 1})
    sql, params = damage
    db = sqlite3.connect(received / "results.sqlite")
    try:
        if sql in JSON_COLUMNS:
            for cell_id, text in db.execute(f"SELECT cell_id, {sql} FROM cells").fetchall():
                db.execute(
                    f"UPDATE cells SET {sql} = ? WHERE cell_id = ?",
                    (json.dumps(retyped(json.loads(text), *params)), cell_id),
                )
        elif params:
            db.execute(sql, params)
        else:
            db.executescript(sql)
    except sqlite3.IntegrityError:  # the store's own constraints refuse this damage
        reject()
    finally:
        db.commit()
        db.close()


roc_arrays = st.one_of(
    st.builds(np.zeros, st.sampled_from([(), (3,), (2, 2), (30_000_000,)])),
    st.builds(np.array, st.lists(st.floats(), max_size=5)),
    st.builds(np.array, st.lists(st.text(max_size=3), max_size=3)),
)


@FUZZ
@given(
    arrays=st.dictionaries(st.sampled_from(["fpr", "tpr", "x"]), roc_arrays, max_size=3),
    junk=st.none() | st.binary(max_size=600),
)
def test_crafted_roc_files_read_as_a_result_or_one_line(arrays, junk):
    """ROC files of any shape, dtype, size (deflated zeros) or bytes."""
    rel = "artifacts/roc.npz"
    with fresh_folder() as received:
        (received / "artifacts").mkdir()
        if junk is None:
            np.savez_compressed(received / rel, **arrays)
        else:
            (received / rel).write_bytes(junk)
        plant_attack(received, artifact=rel)
        with bounded_memory():
            read_everything(received, [report_reader(received)])


@FUZZ
@given(data=st.binary(max_size=2000))
def test_files_that_are_no_database_read_as_one_line(data):
    with fresh_folder() as received:
        (received / "results.sqlite").write_bytes(data)
        read_everything(received, database_readers(received))


def stride_0(path: Path) -> None:
    data = torch.load(path, weights_only=True)
    data["global_model"] = {k: torch.zeros(1).expand(200, 200_000) for k in data["global_model"]}
    torch.save(data, path)


def deflated(path: Path) -> None:
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(name, data)
        z.writestr("archive/data/99", bytes(20_000_000))


@settings(FUZZ, max_examples=8)
@given(
    damage=st.one_of(
        st.sampled_from([stride_0, deflated]),
        st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=64)),
    )
)
def test_crafted_snapshots_attack_as_a_result_or_one_line(damage):
    """Snapshots with stride-0 tensors, deflated entries, or bytes overwritten anywhere."""
    with fresh_folder() as received:
        damaged_snapshots(received, damage)
        with bounded_memory():
            read_everything(received, [cli("attack", str(received), "--attack", "mia-threshold")])


def damaged_snapshots(received: Path, damage: object) -> None:
    for path in sorted((received / "targets").glob("*.pt")):
        if callable(damage):
            damage(path)
        else:
            where, junk = damage
            raw = bytearray(path.read_bytes())
            at = int(where * (len(raw) - 1))
            raw[at : at + len(junk)] = junk
            path.write_bytes(bytes(raw))


def test_the_planted_rows_read_cleanly(received, capsys):
    """The fuzzing's starting point is a folder every reader accepts (so a refusal above is
    the damage's, not the plant's)."""
    plant_attack(received, {"hops": 1})
    assert main(["export", str(received)]) == 0
    assert main(["epsilon", "--run", str(received)]) == 0
    report_content([received])
