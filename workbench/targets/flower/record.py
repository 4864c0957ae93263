"""What crosses between the workbench and a deployed ServerApp, as files that run no code when
read: a JSON skeleton and one ``.npz`` of plain numeric arrays (pickles refused, sizes checked
before anything is inflated: ``fgl_workbench.npz``), a JSON value
``{"__array__": name}`` standing for the npz's array of that name.

The workbench writes the initial model (``initial``); the ServerApp writes what it recorded
(``record``: the transcript of its grid with each message's measured size, Flower's per-round
metrics, the final arrays, its figures, which node is which client), or why it failed
(``failed.json``). The ServerApp runs in the SuperLink's process tree, possibly as another
user or on a machine sharing the folder: the workbench reads its files as untrusted."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fgl_workbench.errors import WorkbenchError
from fgl_workbench.npz import NpzError, as_arrays, checked_arrays, read_bounded, with_arrays
from fgl_workbench.transcript import Message

INITIAL, RECORD, FAILED = "initial", "record", "failed.json"
MAX_ARRAY_BYTES = 1 << 36  # 64 GiB: every round's payloads of a large model, kept
MAX_JSON_BYTES = 1 << 28
MAX_MESSAGE = 2000  # characters of a ServerApp's failure kept
NUMERIC = "biuf"
MESSAGE_FIELDS = {"round": int, "sender": str, "receiver": str, "kind": str, "nbytes": int}


class RecordError(WorkbenchError):
    """A record that is not one the ServerApp writes (or none at all)."""


@dataclass(frozen=True)
class ServerRecord:
    """What the deployed ServerApp recorded: its grid's messages (parties named by node),
    the released arrays, Flower's per-round client metrics, figures, node → client."""

    messages: list[Message]
    arrays: dict[str, torch.Tensor]
    train_metrics: dict[int, dict[str, float]]
    evaluate_metrics: dict[int, dict[str, float]]
    figures: dict[str, float]
    nodes: dict[str, str]


def write(folder: Path, name: str, skeleton: Any) -> None:
    """``skeleton`` (plain data, tensors and arrays anywhere in it) as ``name``.json and
    ``name``.npz; an object met twice (a payload broadcast to several nodes) stored once."""
    arrays: dict[str, np.ndarray] = {}
    text = json.dumps(as_arrays(skeleton, arrays, "a record"))
    np.savez(folder / f"{name}.npz", **arrays)
    (folder / f"{name}.json").write_text(text)


def read(
    folder: Path, name: str, limit: int = MAX_ARRAY_BYTES, json_limit: int = MAX_JSON_BYTES
) -> Any:
    """``write``'s skeleton, rebuilt from data alone: arrays as tensors, nothing unpickled,
    their bytes (as stored and as unpacked) within ``limit``, the JSON within ``json_limit``
    (parsing takes tens of times its size in memory)."""
    try:
        raw = read_bounded(folder / f"{name}.json", _size(folder / f"{name}.json", json_limit))
        npz = folder / f"{name}.npz"
        arrays = checked_arrays(read_bounded(npz, _size(npz, limit)), limit)
        skeleton = json.loads(raw)
    except NpzError as exc:
        raise RecordError(f"{folder / name}: unreadable ({exc})") from None
    except (ValueError, RecursionError) as exc:
        raise RecordError(f"{folder / name}.json: not JSON ({exc})") from None
    for key, array in arrays.items():
        if array.dtype.kind not in NUMERIC:
            raise RecordError(f"{folder / name}: array {key} is {array.dtype}, not numbers")
    tensors = {key: torch.tensor(array) for key, array in arrays.items()}

    def missing() -> RecordError:
        return RecordError(f"{folder / name}: names an array it does not hold")

    try:
        return with_arrays(skeleton, tensors, missing)
    except RecursionError:
        raise RecordError(f"{folder / name}: nested too deeply") from None


def _size(path: Path, limit: int) -> int:
    """What to read of ``path`` at most: its size now, within ``limit`` (a read of the whole
    limit would reserve it first); one that grows before it is read is refused."""
    try:
        return min(limit, path.lstat().st_size)
    except OSError as exc:
        raise NpzError(f"no {path.name} ({exc.strerror})") from None


def write_record(folder: Path, record: ServerRecord) -> None:
    write(
        folder,
        RECORD,
        {
            "messages": [
                {**{f: getattr(m, f) for f in MESSAGE_FIELDS}, "payload": m.payload}
                for m in record.messages
            ],
            "arrays": record.arrays,
            "train": record.train_metrics,
            "evaluate": record.evaluate_metrics,
            "figures": record.figures,
            "nodes": record.nodes,
        },
    )


def read_record(
    folder: Path, limit: int = MAX_ARRAY_BYTES, json_limit: int = MAX_JSON_BYTES
) -> ServerRecord:
    """The ServerApp's record (its arrays within ``limit`` bytes, its JSON within
    ``json_limit``); its failure as a ``RecordError`` where it wrote one."""
    failed = folder / FAILED
    if failed.is_file():
        try:
            reason = json.loads(read_bounded(failed, MAX_JSON_BYTES)).get("error")
        except (NpzError, ValueError, AttributeError):
            reason = "(unreadable)"
        raise RecordError(f"the ServerApp failed: {str(reason)[:MAX_MESSAGE]}")
    data = read(folder, RECORD, limit, json_limit)
    if not isinstance(data, dict) or set(data) != {
        "messages",
        "arrays",
        "train",
        "evaluate",
        "figures",
        "nodes",
    }:
        raise RecordError(f"{folder / RECORD}: not a ServerApp's record")
    return ServerRecord(
        [_message(m, folder) for m in _list(data["messages"], folder)],
        _tensors(data["arrays"], folder),
        _rounds(data["train"], folder),
        _rounds(data["evaluate"], folder),
        _numbers(data["figures"], folder),
        _names(data["nodes"], folder),
    )


def _message(raw: Any, folder: Path) -> Message:
    if not isinstance(raw, dict) or set(raw) != {*MESSAGE_FIELDS, "payload"}:
        raise RecordError(f"{folder / RECORD}: a message without its fields")
    for field, kind in MESSAGE_FIELDS.items():
        if not isinstance(raw[field], kind) or isinstance(raw[field], bool):
            raise RecordError(f"{folder / RECORD}: a message's {field} is not {kind.__name__}")
    payload = raw["payload"]
    if payload is not None and not isinstance(payload, dict):
        raise RecordError(f"{folder / RECORD}: a message's payload is not a mapping")
    return Message(**{f: raw[f] for f in MESSAGE_FIELDS}, payload=payload)


def _list(raw: Any, folder: Path) -> list[Any]:
    if not isinstance(raw, list):
        raise RecordError(f"{folder / RECORD}: messages are not a list")
    return raw


def _tensors(raw: Any, folder: Path) -> dict[str, torch.Tensor]:
    if not isinstance(raw, dict) or not all(isinstance(v, torch.Tensor) for v in raw.values()):
        raise RecordError(f"{folder / RECORD}: arrays are not named tensors")
    return raw


def _numbers(raw: Any, folder: Path) -> dict[str, float]:
    plain = isinstance(raw, dict) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in raw.values()
    )
    if not plain:
        raise RecordError(f"{folder / RECORD}: figures are not named numbers")
    return {k: float(v) for k, v in raw.items()}


def _rounds(raw: Any, folder: Path) -> dict[int, dict[str, float]]:
    if not isinstance(raw, dict) or not all(k.isdigit() for k in raw):
        raise RecordError(f"{folder / RECORD}: metrics are not keyed by round")
    return {int(k): _numbers(v, folder) for k, v in raw.items()}


def _names(raw: Any, folder: Path) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise RecordError(f"{folder / RECORD}: nodes are not named")
    return raw


def write_failure(folder: Path, exc: BaseException) -> None:
    (folder / FAILED).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
