"""The results folder: refused when it is a file, never created by a reader, held by one
writer at a time."""

import json

import pytest

from fgl_workbench.errors import ConfigError
from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main
from fgl_workbench.storage.store import ResultsStore, writing

SUITE = {
    "name": "tiny",
    "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
    "partitions": [{"method": "metis", "num_clients": 2}],
    "targets": [{"name": "fedavg", "params": {"rounds": 1}}],
}


def test_out_naming_a_file_is_a_one_line_error(tmp_path):
    file = tmp_path / "results.txt"
    file.write_text("not a folder")
    with pytest.raises(ConfigError, match="a file, not a folder"):
        api.run_suite(SUITE, file)


def test_reading_a_missing_folder_does_not_create_it(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "dir"
    assert main(["attack", str(missing), "--attack", "mia-threshold"]) == 2
    assert "not a results folder" in capsys.readouterr().err
    assert not missing.exists()
    with pytest.raises(ConfigError):
        ResultsStore(missing, create=False)
    assert not missing.exists()


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path):
    """Two runs into one folder: the second used to overwrite the stored suite under the
    first; now it stops at once, naming the process holding the folder."""
    with writing(tmp_path), pytest.raises(ConfigError, match=r"fgl-workbench pid \d+ is writing"):
        api.run_suite(SUITE, tmp_path)
    assert api.run_suite(SUITE, tmp_path).cells_run == 1  # free again once it is released


def test_the_lock_file_is_never_followed_through_a_symlink(tmp_path):
    """A received folder whose ``.writing`` points at a user's file: taking the lock used to
    truncate and overwrite that file."""
    api.run_suite(SUITE, tmp_path / "run")
    victim = tmp_path / "bashrc"
    victim.write_text("precious")
    lock = tmp_path / "run" / ".writing"
    lock.unlink()
    lock.symlink_to(victim)
    with pytest.raises(ConfigError, match="cannot be opened safely"):
        api.attack(tmp_path / "run", [{"name": "mia-threshold"}])
    assert victim.read_text() == "precious"


def test_the_run_key_is_made_once_and_a_folder_without_one_is_refused(tmp_path):
    store = ResultsStore(tmp_path / "new")
    made = store.streams(reproducible=False)
    assert not made.reproducible and len(made.key) == 32
    assert (tmp_path / "new" / "run.key").stat().st_mode & 0o077 == 0  # the owner's only
    assert made.key not in (tmp_path / "new" / "results.sqlite").read_bytes()
    store.close()
    again = ResultsStore(tmp_path / "new", create=False)
    assert again.streams() == made and again.streams(reproducible=False) == made
    again.close()
    old = ResultsStore(tmp_path / "old")
    old.set_meta("suite_json", "{}")  # a run recorded before run keys existed
    with pytest.raises(ConfigError, match="no run key stored .* new --out"):
        old.streams(reproducible=False)


# a complete row as a run stores it (readers check every field)
CONFIG = {
    "dataset": {"name": "D"},
    "partition": {"method": "p", "num_clients": 1},
    "target": {"name": "t"},
    "seed": 0,
}
UTILITY, COMM = {"accuracy": 0.8, "macro_f1": 0.7}, {"rounds": 1, "bytes": {"up": 0, "down": 0}}
ROW = (CONFIG, UTILITY, COMM, [])
INSERT_C0 = (
    "INSERT INTO cells (cell_id, label, config_hash, config_json, utility_json, comm_json, "
    "partition_json, epsilon, seconds_partition, seconds_train, created) "
    "VALUES ('c0','D/p/t/seed0','h',?,?,?,'[]',2,0,0,0)"
)
C0_JSON = tuple(json.dumps(x) for x in (CONFIG, UTILITY, COMM))


def epsilons_table(folder, extra_columns: str, rows: str = ""):
    """A results folder holding only an ``epsilons`` table as an earlier version wrote it,
    with ``extra_columns`` before its key."""
    import sqlite3

    folder.mkdir()
    db = sqlite3.connect(folder / "results.sqlite")
    db.executescript(
        "CREATE TABLE epsilons (cell_id TEXT NOT NULL, adversary TEXT NOT NULL, unit TEXT "
        "NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL, note TEXT NOT NULL, "
        f"{extra_columns}PRIMARY KEY (cell_id, adversary, unit));{rows}"
    )
    db.commit()
    db.close()
    return folder


def test_an_older_folder_is_read_unchanged_and_gains_the_pld_column_on_write(tmp_path):
    """A folder written before the PLD column existed reads with PLD not measured and is not
    altered by reading (an older version may still write there); writing a cell adds the
    column, keeps the old rows' ε, and stores both figures; a second writer adding the
    column meanwhile is no error."""
    import sqlite3

    from fgl_workbench.storage.store import CellRow

    old = epsilons_table(
        tmp_path / "old",
        "",
        "INSERT INTO epsilons VALUES ('c0', 'querier', 'record', 2.0, 1e-5, 'SubsampledGaussian');",
    )

    def columns():
        con = sqlite3.connect(old / "results.sqlite")
        try:
            return [r[1] for r in con.execute("PRAGMA table_info(epsilons)")]
        finally:
            con.close()

    row = {"adversary": "querier", "unit": "record", "epsilon": 1.5, "delta": 1e-5, "note": ""}
    c0 = CellRow("c0", "D/p/t/seed0", *ROW, 2.0, 0, 0)
    reader = ResultsStore(old, create=False)
    reader._db.execute(INSERT_C0, C0_JSON)
    reader._db.commit()
    (got,) = reader.cells()
    assert got.cell_id == c0.cell_id and got.epsilons[0]["epsilon_pld"] is None
    assert got.epsilons[0]["epsilon"] == 2.0
    assert "epsilon_pld" not in columns()
    racing = ResultsStore(old, create=False)  # opened before the column exists
    store = ResultsStore(old, create=False)
    store.put_cell(
        CellRow("c1", "D/p/t/seed1", *ROW, 1.5, 0, 0, ({**row, "epsilon_pld": 1.2},)), "h"
    )
    assert "epsilon_pld" in columns()
    racing._add_columns("epsilons")  # the race: the column appeared meanwhile
    by_id = {c.cell_id: c.epsilons for c in store.cells()}
    assert by_id["c1"] == ({**row, "epsilon_pld": 1.2},)
    assert by_id["c0"][0]["epsilon"] == 2.0 and by_id["c0"][0]["epsilon_pld"] is None
    for s in (reader, racing, store):
        s.close()


def test_the_pld_column_is_found_whatever_its_case(tmp_path):
    """SQLite's names are case-insensitive: a folder whose column is spelt EPSILON_PLD has it
    (adding it again would fail)."""

    from fgl_workbench.storage.store import CellRow

    odd = epsilons_table(tmp_path / "odd", "EPSILON_PLD REAL, ")
    row = {"adversary": "server", "unit": "node", "epsilon": 3.0, "delta": 1e-5, "note": ""}
    store = ResultsStore(odd, create=False)
    store.put_cell(
        CellRow("c", "D/p/t/seed0", *ROW, None, 0, 0, ({**row, "epsilon_pld": 2.5},)), "h"
    )
    assert store.cells()[0].epsilons == ({**row, "epsilon_pld": 2.5},)
    store.close()


OLD_AUDITS = (
    "CREATE TABLE audits (cell_id TEXT NOT NULL, defense TEXT NOT NULL, adversaries TEXT NOT "
    "NULL, unit TEXT NOT NULL, mechanism TEXT NOT NULL, claimed REAL NOT NULL, lower_bound "
    "REAL NOT NULL, confidence REAL NOT NULL, delta REAL NOT NULL, canaries INTEGER NOT NULL, "
    "guesses INTEGER NOT NULL, correct INTEGER NOT NULL, seconds REAL NOT NULL);"
    "INSERT INTO audits VALUES ('c0', 'dp-sgd', 'clients/querier/server', 'record', 'g', 1.0, "
    "0.4, 0.95, 1e-5, 1000, 100, 70, 1.0);"
)


def test_an_older_folders_audits_read_without_the_new_columns(tmp_path):
    """Audit rows written before the ceiling, μ and verdict columns read with them empty,
    their verdict from bound ≤ claim, and writing adds the columns."""
    import sqlite3

    from fgl_workbench.audits.stored import bound_text, holds
    from fgl_workbench.storage.store import CellRow

    old = epsilons_table(tmp_path / "old", "epsilon_pld REAL, ", OLD_AUDITS)
    store = ResultsStore(old, create=False)
    store._db.execute(INSERT_C0, C0_JSON)
    store._db.commit()
    (got,) = store.cells()
    (audit,) = got.audits
    assert audit["ceiling"] is None and audit["holds"] is None and holds(audit)
    assert bound_text(audit) == "ε ≥ 0.400"
    new = {**audit, "cell_id": "c1", "holds": 0, "ceiling": 5.4, "mu": 0.2, "mu_ceiling": 2.0}
    del new["cell_id"]
    store.put_cell(CellRow("c1", "D/p/t/seed1", *ROW, 1.0, 0, 0, (), (new,)), "h")
    by_id = {c.cell_id: c.audits for c in store.cells()}
    assert not holds(by_id["c1"][0]) and by_id["c0"][0]["ceiling"] is None
    assert "ceiling 5.40" in bound_text(by_id["c1"][0])
    con = sqlite3.connect(old / "results.sqlite")
    assert "mu_ceiling" in [r[1] for r in con.execute("PRAGMA table_info(audits)")]
    con.close()
    store.close()


def test_an_older_folder_reads_without_histories_and_gains_the_column_on_write(tmp_path):
    """A folder written before histories were stored reads with none, unchanged by reading;
    writing a cell adds the column and stores its rounds, NaN (a round not validated) too."""
    import hashlib
    import math
    import shutil
    from pathlib import Path

    from fgl_workbench.storage.store import CellRow

    old = tmp_path / "old"
    shutil.copytree(Path(__file__).with_name("before_issue_42") / "folder", old)
    before = hashlib.sha256((old / "results.sqlite").read_bytes()).hexdigest()
    assert all(c.history == () for c in ResultsStore(old, read_only=True).cells())
    assert api.history(old).empty and "round" in api.history(old)
    assert hashlib.sha256((old / "results.sqlite").read_bytes()).hexdigest() == before
    rounds = ({"round": 0, "train_loss": 1.2, "val_accuracy": math.nan}, {"round": 1.0})
    store = ResultsStore(old, create=False)
    store.put_cell(CellRow("c1", "D/p/t/seed1", *ROW, 1.0, 0, 0, history=rounds), "h")
    by_id = {c.cell_id: c.history for c in store.cells()}
    store.close()
    (first, second), others = by_id.pop("c1"), by_id.values()
    assert first["train_loss"] == 1.2 and math.isnan(first["val_accuracy"])
    assert second == {"round": 1.0} and len(others) == 3 and not any(others)
