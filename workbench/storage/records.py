"""Per-record scores of a membership attack, kept beside its ROC: each candidate's id, the
attack's score and whether it was a member, so a stored row can be audited again
(``fgl_workbench.external.audit_scores`` gives its metrics exactly) and its member and
non-member score histograms drawn. Read as untrusted input: exactly these arrays, their
types and sizes checked before anything is decompressed, no pickle."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fgl_workbench.errors import ConfigError

RECORDS_CAP = 50_000_000  # candidates a stored file may hold (a 10M-node cell has ~5.4M)
FIELDS = {"ids": "iu", "scores": "f", "is_member": "b", "threshold": "f"}


@dataclass(frozen=True)
class ScoredRecords:
    """One attack's scores, row-aligned: ``threshold`` is the attack's own decision threshold
    (NaN where it stated none)."""

    ids: np.ndarray
    scores: np.ndarray
    is_member: np.ndarray
    threshold: float = float("nan")


def records_artifact(cell_id: str, attack_key: str) -> str:
    """Where an attack row's records live, relative to the results folder: beside its ROC."""
    return str(Path("artifacts") / cell_id / f"{attack_key}.records.npz")


def write_records(f: BinaryIO, records: ScoredRecords) -> None:
    np.savez_compressed(
        f,
        ids=np.asarray(records.ids, dtype=np.int64),
        scores=np.asarray(records.scores, dtype=np.float64),
        is_member=np.asarray(records.is_member, dtype=bool),
        threshold=np.float64(records.threshold),
    )


def read_records(path: Path) -> ScoredRecords:
    """The records in ``path``, or a one-line ``ConfigError`` naming what is wrong."""
    try:
        with zipfile.ZipFile(path) as z:
            entries = {i.filename: i.file_size for i in z.infolist()}
        if entries.keys() != {f"{k}.npy" for k in FIELDS}:
            raise ValueError(f"expected exactly the arrays {', '.join(FIELDS)}")
        if max(entries.values()) > RECORDS_CAP * 8 + 1024:
            raise ValueError(f"an array larger than {RECORDS_CAP:,} records")
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in FIELDS}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, NotImplementedError) as exc:
        raise ConfigError(f"{path}: not stored records ({str(exc)[:120]})") from None
    size = arrays["ids"].shape
    for name, kinds in FIELDS.items():
        a = arrays[name]
        if a.dtype.kind not in kinds:
            raise ConfigError(f"{path}, field {name}: expected dtype kind {kinds!r}")
        if name != "threshold" and (a.ndim != 1 or a.shape != size):
            raise ConfigError(f"{path}, field {name}: expected a 1-D array as long as ids")
    if arrays["threshold"].shape != ():
        raise ConfigError(f"{path}, field threshold: expected one number")
    return ScoredRecords(
        arrays["ids"], arrays["scores"], arrays["is_member"], float(arrays["threshold"])
    )
