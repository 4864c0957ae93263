"""Issue 43's proofs against reading a received folder: resource bombs, readers that write.
Each is one line naming the file (and the field), leaves the folder as it was, and costs
no more memory or time than the folder's own size."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from crafting import execute, plant_attack

from fgl_workbench.errors import ConfigError
from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """The error ``argv`` ends in: exit status 2, one line, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    return err


def snapshots(folder: Path) -> list[Path]:
    return sorted((folder / "targets").glob("*.pt"))


def test_a_stride_0_snapshot_is_refused_before_anything_is_built(received, capsys):
    """``torch.zeros(1).expand(H, N)`` stores one number yet passes the weight-count check:
    restoring built and filled a model of H × N weights (1.5 GiB in the proof)."""
    for path in snapshots(received):
        data = torch.load(path, weights_only=True)
        data["global_model"] = {
            k: torch.zeros(1, dtype=v.dtype).expand(v.shape) if v.dim() else v
            for k, v in data["global_model"].items()
        }
        torch.save(data, path)
    err = one_line_error(capsys, ["attack", str(received), "--attack", "mia-threshold"])
    assert "stride-0 or overlapping" in err and ".pt" in err


def test_a_compressed_snapshot_is_refused_before_it_is_inflated(received, capsys):
    """A snapshot whose entries are deflated (a zip bomb: 2 MB inflating 1000× in the
    proof): torch.save never compresses, so any compressed entry is refused unread."""
    for path in snapshots(received):
        with zipfile.ZipFile(path) as z:
            entries = [(i, z.read(i)) for i in z.infolist()]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for info, data in entries:
                z.writestr(info.filename, data)
    err = one_line_error(capsys, ["attack", str(received), "--attack", "mia-threshold"])
    assert "compressed entry" in err and ".pt" in err


@pytest.mark.parametrize(
    ("damage", "field"),
    [
        (
            lambda d: d["served"]["clients"][0].update(ids=torch.tensor([10**15])),
            "served.clients.0.ids",
        ),
        (lambda d: d["recipe"].update(num_clients="2"), "recipe.num_clients"),
        (lambda d: d.pop("messages"), "messages"),
    ],
)
def test_a_mistyped_snapshot_is_one_line_naming_the_field(received, capsys, damage, field):
    """A snapshot's fields were used as found: an out-of-range node id reached an index
    (a traceback), a missing key a ``KeyError``."""
    for path in snapshots(received):
        data = torch.load(path, weights_only=True)
        if data["served"] is not None or "served" not in field:
            damage(data)
        torch.save(data, path)
    err = one_line_error(capsys, ["attack", str(received), "--attack", "mia-threshold"])
    assert field in err


def roc_file(folder: Path, **arrays: np.ndarray) -> str:
    rel = "artifacts/planted.npz"
    (folder / "artifacts").mkdir(exist_ok=True)
    np.savez_compressed(folder / rel, **arrays)
    plant_attack(folder, artifact=rel)
    return rel


def test_a_roc_file_that_inflates_is_refused_before_decompressing(received, capsys):
    """A few hundred KB of deflated zeros claiming 40 M points per curve."""
    zeros = np.zeros(40_000_000, dtype=np.float64)
    rel = roc_file(received, fpr=zeros, tpr=zeros)
    assert (received / rel).stat().st_size < 1_000_000
    err = one_line_error(capsys, ["report", str(received)])
    assert "planted.npz" in err and "larger than" in err


@pytest.mark.parametrize(
    "arrays",
    [
        {"fpr": np.array(0.5), "tpr": np.array(0.5)},  # 0-d: the 586-byte proof
        {"fpr": np.array(["a", "b"]), "tpr": np.array(["a", "b"])},
        {"fpr": np.linspace(0, 1, 5), "tpr": np.linspace(0, 1, 4)},
        {"fpr": np.linspace(0, 1, 5)},
        {"fpr": np.zeros(0), "tpr": np.zeros(0)},
        {"fpr": np.array([0.0, np.nan]), "tpr": np.array([0.0, 1.0])},
    ],
)
def test_a_malformed_roc_file_is_one_line_naming_it(received, capsys, arrays):
    roc_file(received, **arrays)
    err = one_line_error(capsys, ["report", str(received)])
    assert "planted.npz" in err


def test_a_recursive_view_as_cells_is_refused_not_run(received):
    """``cells`` replaced by a view that never ends made report and export hang."""
    execute(
        received,
        "DROP TABLE cells",
        "CREATE VIEW cells AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        "SELECT 'c' || i AS cell_id, 'l' AS label, '' AS config_hash, '{}' AS config_json, "
        "'{}' AS utility_json, '{}' AS comm_json, '[]' AS partition_json, NULL AS epsilon, "
        "0 AS seconds_partition, 0 AS seconds_train, 0 AS created FROM n",
    )
    for verb in ("export", "report"):
        done = subprocess.run(
            [sys.executable, "-m", "fgl_workbench", verb, str(received)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and "view 'cells'" in done.stderr, done.stderr[-500:]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TRIGGER t AFTER INSERT ON meta BEGIN DELETE FROM cells; END",
        "CREATE INDEX i ON cells (label)",
        "CREATE TABLE extra (x)",
        "ALTER TABLE cells ADD COLUMN extra TEXT",
    ],
)
def test_anything_beyond_the_stores_schema_is_refused(received, sql):
    execute(received, sql)
    with pytest.raises(ConfigError, match="results.sqlite: "):
        api.results(received)


def test_a_long_label_is_refused_not_laid_out(received):
    """A 1 MB cell label kept the report busy past 180 s."""
    execute(received, "UPDATE cells SET label = ?", params=("x" * 1_000_000,))
    with pytest.raises(ConfigError, match=r"results.sqlite: cells row .*field label"):
        api.results(received)


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("config_json", '{"seed": 0}', "config_json, field dataset"),
        ("config_json", "not json", "config_json: not JSON"),
        ("utility_json", '{"accuracy": "high", "macro_f1": 0.1}', "utility_json, field accuracy"),
        ("comm_json", '{"rounds": 2}', "comm_json, field bytes"),
        ("partition_json", "{}", "partition_json: expected a list"),
        ("partition_json", '[{"size": -1}]', "partition_json[0], field client_id"),
        ("seconds_train", "slow", "field seconds_train"),
        ("config_json", "[" * 100 + "]" * 100, "config_json: nested more than"),
    ],
)
def test_a_malformed_cell_row_names_the_file_the_row_and_the_field(
    received, capsys, column, value, field
):
    execute(received, f"UPDATE cells SET {column} = ?", params=(value,))
    err = one_line_error(capsys, ["export", str(received)])
    assert "results.sqlite: cells row " in err and field in err


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ('{"round": 0}', "history_json: expected a list"),
        ('[{"loss": 0.5}]', "history_json[0], field round"),
        ('[{"round": 0}, {"round": NaN}]', "history_json[1], field round"),
        ('[{"round": 0, "loss": "low"}]', "history_json[0], field loss"),
    ],
)
def test_a_malformed_history_names_the_round_and_the_field(received, capsys, value, field):
    """The received folder predates the history: its column added as a writer adds it."""
    execute(received, "ALTER TABLE cells ADD COLUMN history_json TEXT")
    execute(received, "UPDATE cells SET history_json = ?", params=(value,))
    err = one_line_error(capsys, ["export", str(received)])
    assert "results.sqlite: cells row " in err and field in err


def test_export_does_not_recreate_a_dropped_table(received, capsys):
    """Readers opened the database read-write: ``export`` re-created a dropped table."""
    execute(received, "DROP TABLE audits")
    before = digest(received / "results.sqlite")
    err = one_line_error(capsys, ["export", str(received)])
    assert "results.sqlite: the table audits is missing" in err
    assert digest(received / "results.sqlite") == before


def test_readers_leave_the_database_unchanged(received, capsys):
    """Opening a received database read-write switched it to WAL (its header changed) and
    could write anything; readers now open it read-only."""
    db = sqlite3.connect(received / "results.sqlite")
    db.execute("PRAGMA journal_mode=DELETE")
    db.close()
    before = digest(received / "results.sqlite")
    assert main(["export", str(received)]) == 0
    assert main(["epsilon", "--run", str(received)]) == 0
    assert digest(received / "results.sqlite") == before


def test_readers_create_no_files_beside_the_database(received):
    """A read-only open of a database in WAL mode created ``-wal`` and ``-shm`` files in the
    received folder; without a writer's ``-wal`` there, readers now open it immutable."""
    header = (received / "results.sqlite").read_bytes()[18:20]
    assert header == b"\x02\x02"  # WAL mode, as every store is written
    before = sorted(p.name for p in received.iterdir())
    assert main(["export", str(received)]) == 0
    assert main(["epsilon", "--run", str(received)]) == 0
    assert main(["report", str(received)]) == 0
    after = sorted(p.name for p in received.iterdir())
    assert [n for n in after if n not in before] == ["report.html", "report.pdf", "results.csv"]


def test_a_reader_gives_up_on_a_query_past_its_budget(received, capsys, monkeypatch):
    """Reading is bounded in SQLite's own steps, not only by the schema's check: a database
    whose queries would run longer than any store's is one line, not a hang."""
    from fgl_workbench.storage import store

    monkeypatch.setattr(store, "READ_BLOCK", 1)  # a budget the real store's reading exceeds
    monkeypatch.setattr(store, "READ_BLOCKS", 200)
    err = one_line_error(capsys, ["export", str(received)])
    assert "results.sqlite" in err and "(a query past 2e+02 SQLite steps" in err
