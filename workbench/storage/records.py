"""Per-record scores of a membership attack, kept beside its ROC: each candidate's id, the
attack's score and whether it was a member, so a stored row can be audited again
(``fgl_workbench.external.audit_scores`` gives its metrics exactly) and its member and
non-member score histograms drawn. Read as untrusted input (``fgl_workbench.npz``):
exactly these arrays, their declared sizes checked before anything is decompressed, then
their types and shapes; no pickle."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from fgl_workbench.errors import ConfigError
from fgl_workbench.npz import NpzError, checked_arrays, read_bounded

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
        data = read_bounded(path, RECORDS_CAP * 17 + 4096)  # ids, scores, flags: 17 B each
        arrays = checked_arrays(data, RECORDS_CAP * 17 + 4096, set(FIELDS))
    except NpzError as exc:
        raise ConfigError(f"{path}: not stored records ({exc})") from None
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
