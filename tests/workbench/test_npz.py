"""Hostile .npz files (issue 45's review: B1, B2, B5, B7, and the diff review's bz2 bomb):
each is one NpzError with its reason, before anything is allocated on a size the file only
claims."""

import io
import struct
import zipfile

import numpy as np
import pytest

from fgl_workbench.npz import NpzError, checked_arrays

LIMIT = 10**8


def npz(arrays, compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, a in arrays.items():
            data = io.BytesIO()
            if isinstance(a, bytes):
                data.write(a)
            else:
                np.save(data, a, allow_pickle=False)
            z.writestr(f"{name}.npy", data.getvalue())
    return buf.getvalue()


def lying_header(shape) -> bytes:
    """A .npy whose header declares ``shape`` over 8 bytes of data."""
    header = repr({"descr": "<f8", "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 8


def encrypted(data: bytes) -> bytes:
    raw = bytearray(data)
    for signature, offset in ((b"PK\x01\x02", 8), (b"PK\x03\x04", 6)):
        start = 0
        while (i := raw.find(signature, start)) >= 0:
            start = i + 4
            raw[i + offset] |= 1  # the "encrypted" flag
    return bytes(raw)


def test_plain_arrays_come_back():
    got = checked_arrays(npz({"a": np.arange(3), "b": np.ones(2)}), LIMIT, {"a", "b"})
    assert got["a"].tolist() == [0, 1, 2] and got["b"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "data, reason",
    [
        (encrypted(npz({"a": np.arange(3)})), "RuntimeError"),
        (npz({"a": lying_header((10**13,))}), "header does not match"),
        (npz({"a": np.zeros(20_000_000)}), "larger than"),  # 160 MB of zeros in ~160 KB
        (npz({"a": np.arange(3), "b": np.arange(3)}), "expected exactly the arrays a"),
        (b"PK\x03\x04 not a zip", "BadZipFile"),
    ],
    ids=["encrypted member", "header of 10^13 elements", "zip bomb", "extra array", "not a zip"],
)
def test_a_hostile_file_is_one_npz_error(data, reason):
    with pytest.raises(NpzError, match=reason):
        checked_arrays(data, LIMIT, {"a"})


def test_constant_scores_the_workbench_wrote_come_back():
    """savez_compressed shrinks a constant array ~1,000×: that is no bomb."""
    buf = io.BytesIO()
    np.savez_compressed(buf, a=np.zeros(200_000))
    assert checked_arrays(buf.getvalue(), LIMIT, {"a"})["a"].sum() == 0


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_bz2_and_lzma_members_are_refused_before_opening(method):
    """zipfile unpacks such a chunk whole before cutting it to the claimed size."""
    with pytest.raises(NpzError, match="is not deflate"):
        checked_arrays(npz({"a": np.arange(3)}, method), LIMIT, {"a"})


def test_an_unknown_compression_method_is_one_npz_error():
    raw = bytearray(npz({"a": np.arange(3)}, zipfile.ZIP_STORED))
    for signature, offset in ((b"PK\x01\x02", 10), (b"PK\x03\x04", 8)):
        i = raw.find(signature)
        raw[i + offset : i + offset + 2] = struct.pack("<H", 99)
    with pytest.raises(NpzError, match="compression 99 is not deflate"):
        checked_arrays(bytes(raw), LIMIT, {"a"})


class _Missing(Exception):
    pass


def _read(skeleton, arrays):
    from fgl_workbench.npz import with_arrays

    return with_arrays(skeleton, arrays, _Missing)


def test_bytes_come_back_each_from_its_own_array():
    from fgl_workbench.npz import as_arrays

    arrays: dict = {}
    skeleton = as_arrays({"keys": [b"\x00k1", b"\x00k1"], "w": np.ones(2)}, arrays)
    assert _read(skeleton, arrays)["keys"] == [b"\x00k1", b"\x00k1"]
    assert len(arrays) == 3  # the two equal bytes are two arrays: nothing is read twice


@pytest.mark.parametrize(
    "skeleton",
    [
        [{"__bytes__": "a"}, {"__bytes__": "a"}],  # one array made into copies: a size bomb
        [{"__array__": "a"}, {"__bytes__": "a"}],
        {"__bytes__": ["a"]},  # a name that is not a string (was: TypeError)
        {"__array__": {"k": 1}},
        {"__bytes__": "w"},  # not a one-dimensional uint8 array
    ],
)
def test_a_hostile_skeleton_is_the_callers_error(skeleton):
    """A review's records (2026-11-27): a bytes name read twice decoded a 100 KiB record to
    131 MB; an unhashable name raised a bare TypeError."""
    with pytest.raises(_Missing):
        _read(skeleton, {"a": np.zeros(4, np.uint8), "w": np.zeros((2, 2))})
