"""Reading an ``.npz`` someone else wrote (a results folder's artifacts, a fenced worker's
output) without trusting it: no pickle, and nothing allocated or decompressed on a size the
file merely claims. Members are stored or deflated only (zipfile inflates those to at most
their declared size; it unpacks a bz2 or LZMA chunk whole first, a bomb under a small claim),
the declared sizes stay within the caller's limit, each member's ``.npy`` header must promise
exactly the bytes the archive says it holds (a header declaring 10^13 elements over a few
bytes would be allocated first), and every way the zip or numpy layer fails (an encrypted
member, a bad CRC) is one ``NpzError`` with its reason, for the caller to word."""

from __future__ import annotations

import io
import os
import stat
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

PLAIN = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # what numpy's savez and savez_compressed write
HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


ARRAY = "__array__"  # a JSON value {"__array__": name}: the npz's array of that name
BYTES = "__bytes__"  # a JSON value {"__bytes__": name}: the npz's uint8 array, as bytes


class NpzError(ValueError):
    """The bytes are not a plain numeric ``.npz`` within the caller's limits."""


def as_arrays(value: Any, arrays: dict[str, np.ndarray], what: str = "a value") -> Any:
    """``value`` as a JSON skeleton, each tensor or array moved into ``arrays`` (one entry
    per object, however often it appears) and named there by ``{"__array__": name}``, each
    ``bytes`` as a uint8 array named by ``{"__bytes__": name}``: what ``with_arrays`` reads
    back. Anything but plain data is a TypeError naming ``what``."""
    seen: dict[int, str] = {}

    def encode(item: Any) -> Any:
        if isinstance(item, np.ndarray | torch.Tensor):
            if id(item) not in seen:
                seen[id(item)] = f"a{len(arrays)}"
                arrays[seen[id(item)]] = (
                    item.detach().cpu().numpy() if isinstance(item, torch.Tensor) else item
                )
            return {ARRAY: seen[id(item)]}
        if isinstance(item, np.generic):
            return item.item()
        if isinstance(item, bytes):  # keys, ciphertexts, masked vectors: numbers in the npz
            name = f"a{len(arrays)}"
            arrays[name] = np.frombuffer(item, dtype=np.uint8)
            return {BYTES: name}
        if isinstance(item, dict):
            return {str(k): encode(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [encode(v) for v in item]
        if item is None or isinstance(item, bool | int | float | str):
            return item
        raise TypeError(f"{what} holds a {type(item).__name__}: not plain data")

    return encode(value)


def with_arrays(value: Any, arrays: Mapping[str, Any], missing: Callable[[], Exception]) -> Any:
    """A JSON skeleton with each ``{"__array__": name}`` replaced by ``arrays[name]``, each
    ``{"__bytes__": name}`` by that one-dimensional uint8 array's bytes (a name they do not
    hold, not a string, not such an array, or named for bytes twice or also as an array,
    raises ``missing()``: each bytes value is a copy, and ``as_arrays`` gives each its own
    array, so a name read twice is a record multiplying its size): the arrays come from the
    npz, never from the JSON, so nothing in the skeleton is more than data. Deep nesting
    raises RecursionError."""
    named: dict[str, str] = {}

    def held(marker: str, name: Any) -> Any:
        if not isinstance(name, str) or name not in arrays:
            raise missing()
        if named.setdefault(name, marker) != marker or (marker == BYTES and name in taken):
            raise missing()
        taken.add(name)
        return arrays[name]

    taken: set[str] = set()

    def decode(item: Any) -> Any:
        if isinstance(item, dict) and set(item) == {ARRAY}:
            return held(ARRAY, item[ARRAY])
        if isinstance(item, dict) and set(item) == {BYTES}:
            array = held(BYTES, item[BYTES])
            array = array.numpy() if isinstance(array, torch.Tensor) else np.asarray(array)
            if array.dtype != np.uint8 or array.ndim != 1:
                raise missing()
            return array.tobytes()
        if isinstance(item, dict):
            return {k: decode(v) for k, v in item.items()}
        if isinstance(item, list):
            return [decode(v) for v in item]
        return item

    return decode(value)


def checked_arrays(
    data: bytes, max_bytes: int, names: set[str] | None = None
) -> dict[str, np.ndarray]:
    """Every array of the npz in ``data``: exactly ``names`` where given, at most
    ``max_bytes`` uncompressed in all, each header matching its stored size, no objects."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            found = {i.filename.removesuffix(".npy") for i in infos}
            if names is not None and (found != names or len(infos) != len(names)):
                raise NpzError(f"expected exactly the arrays {', '.join(sorted(names))}")
            if sum(i.file_size for i in infos) > max_bytes:
                raise NpzError(f"its arrays are larger than {max_bytes:,} bytes")
            for info in infos:
                if info.compress_type not in PLAIN:
                    raise NpzError(
                        f"{info.filename}: compression {info.compress_type} is not deflate"
                    )
                with archive.open(info) as member:
                    _check_header(member, info.file_size, info.filename)
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except NpzError:
        raise
    except (
        OSError,
        ValueError,
        RuntimeError,  # an encrypted member
        NotImplementedError,  # an unknown compression method
        EOFError,
        KeyError,
        MemoryError,
        zlib.error,
        zipfile.BadZipFile,
    ) as exc:
        raise NpzError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}") from None


def _check_header(member: io.BufferedIOBase, stored: int, name: str) -> None:
    version = np.lib.format.read_magic(member)
    if version not in HEADER_READERS:
        raise NpzError(f"{name}: format {version} is not numpy's 1.0 or 2.0")
    shape, _, dtype = HEADER_READERS[version](member, max_header_size=10_000)
    wanted = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if dtype.hasobject or wanted != stored - member.tell():
        raise NpzError(f"{name}: its header does not match its stored size")


def read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes, read once through one descriptor that follows no link (no second
    open a process left behind could swap under it): a regular file of at most ``limit``
    bytes, else ``NpzError``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NpzError(f"no {path.name} ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NpzError(f"{path.name} is not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NpzError(f"{path.name} exceeds {limit:,} bytes")
    return data
