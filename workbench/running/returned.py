"""What a plug-in's worker hands back, read as data only.

The worker is fenced, the runner is not: whatever the runner unpickles from the worker could
run code in it (a result whose scores unpickle as a call to ``eval`` read ``run.key`` in an
independent review). So nothing comes back through a pickle: the worker writes its
``AttackOutput`` into its scratch folder as one ``.npz`` of plain arrays (``allow_pickle``
off) and one JSON skeleton, or one JSON line saying why it failed, and the runner rebuilds
the output from those, refusing anything else and anything too large."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from fgl_workbench.attacks import AttackOutput
from fgl_workbench.errors import NotApplicableError, WorkbenchError
from fgl_workbench.npz import NpzError, as_arrays, checked_arrays, read_bounded, with_arrays
from fgl_workbench.sandbox import SandboxError

OUTPUT, ARRAYS, FAILED = "output.json", "output.npz", "failed.json"
MISSING = "its output names an array it did not write"
MAX_BYTES = 1 << 30  # what a worker may hand back, files and decompressed arrays alike
MAX_JSON = 1 << 20  # its JSON skeleton or failure line: arrays travel in the npz
MAX_MESSAGE = 500  # characters of a worker's failure message kept
MAX_COUNTS, MAX_COUNT_NAME = 64, 64  # what an attack counts beside its metrics, stored per row
NUMERIC = "biuf"  # array kinds accepted: bool, integers, floats


class ReturnError(WorkbenchError):
    """A plug-in failed in its worker, or handed back something that is not an output."""


# failures that keep their meaning across the fence: the row's "not applicable", a fence the
# kernel refused
KINDS: dict[type, str] = {NotApplicableError: "not_applicable", SandboxError: "refused"}


def write_output(out: AttackOutput, folder: Path) -> None:
    """In the worker: ``out`` as data the runner can read without running anything."""
    arrays: dict[str, np.ndarray] = {}

    what = "an attack's output"
    skeleton = {
        "scores": as_arrays(np.asarray(out.scores), arrays, what),
        "threshold": None if out.threshold is None else float(out.threshold),
        "details": as_arrays(dict(out.details), arrays, what),
    }
    np.savez(folder / ARRAYS, **arrays)
    (folder / OUTPUT).write_text(json.dumps(skeleton))


def write_failure(exc: Exception, folder: Path) -> None:
    """In the worker: why the plug-in did not run or failed, as a kind and one line."""
    kind = KINDS.get(type(exc), "error")
    message = str(exc) if kind != "error" else f"{type(exc).__name__}: {exc}"
    (folder / FAILED).write_text(json.dumps({"kind": kind, "message": message}))


def read_output(folder: Path, name: str) -> AttackOutput:
    """In the runner: the worker's output, rebuilt from data alone; a ``ReturnError`` (one
    line) for a failure it reported or anything that is not an attack's output."""
    failed = folder / FAILED
    if failed.is_file():
        report = _loaded_json(failed, name)
        report = report if isinstance(report, dict) else {}
        text = " ".join(str(report.get("message")).split())[:MAX_MESSAGE]
        if report.get("kind") == "not_applicable":
            raise NotApplicableError(text)
        if report.get("kind") == "refused":
            raise SandboxError(text)
        raise ReturnError(f"{name} failed in its worker: {text}")
    skeleton = _loaded_json(folder / OUTPUT, name)
    arrays = _loaded_arrays(folder / ARRAYS, name)

    def decode(value: Any) -> Any:
        return with_arrays(value, arrays, lambda: ReturnError(f"{name}: {MISSING}"))

    if not isinstance(skeleton, dict) or set(skeleton) != {"scores", "threshold", "details"}:
        raise ReturnError(f"{name}: its output is not scores, threshold and details")
    try:
        scores, details = decode(skeleton["scores"]), decode(skeleton["details"])
    except RecursionError:
        raise ReturnError(f"{name}: its output is nested too deeply") from None
    threshold = skeleton["threshold"]
    if not isinstance(scores, np.ndarray):
        raise ReturnError(f"{name}: its scores are not an array")
    if threshold is not None and not isinstance(threshold, int | float):
        raise ReturnError(f"{name}: its threshold is not a number")
    if not isinstance(details, dict):
        raise ReturnError(f"{name}: its details are not a mapping")
    _check_counts(details.get("counts", {}), name)
    return AttackOutput(scores, None if threshold is None else float(threshold), details)


def _check_counts(counts: Any, name: str) -> None:
    """``details["counts"]``, stored beside the metrics: a few named finite numbers (200 000
    of them made one row's metrics too long for any reader of the folder)."""
    plain = isinstance(counts, dict) and len(counts) <= MAX_COUNTS
    plain = plain and all(
        isinstance(k, str)
        and 0 < len(k) <= MAX_COUNT_NAME
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        for k, v in counts.items()
    )
    if not plain:
        raise ReturnError(
            f"{name}: its counts are not at most {MAX_COUNTS} names of at most "
            f"{MAX_COUNT_NAME} characters, each a finite number"
        )


def _loaded_json(path: Path, name: str) -> Any:
    try:
        return json.loads(_bounded(path, name, MAX_JSON))
    except (ValueError, RecursionError) as exc:
        raise ReturnError(
            f"{name}: its worker handed back no readable {path.name} ({exc})"
        ) from None


def _loaded_arrays(path: Path, name: str) -> dict[str, np.ndarray]:
    """Every array of the npz, read from one copy of the file: each checked (plain numeric,
    its header's shape exactly its stored size, the sizes declared before decompressing)
    and read with pickles refused."""
    try:
        arrays = checked_arrays(_bounded(path, name, MAX_BYTES), MAX_BYTES)
    except NpzError as exc:
        raise ReturnError(f"{name}: its worker handed back unreadable arrays ({exc})") from None
    for key, array in arrays.items():
        if array.dtype.kind not in NUMERIC:
            raise ReturnError(f"{name}: its output's array {key} is {array.dtype}, not numbers")
    return arrays


def _bounded(path: Path, name: str, limit: int) -> bytes:
    """The worker's file, read as any untrusted file is (``fgl_workbench.npz.read_bounded``)."""
    try:
        return read_bounded(path, limit)
    except NpzError as exc:
        raise ReturnError(f"{name}: its worker handed back {exc}") from None
