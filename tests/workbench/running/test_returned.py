"""What a plug-in's worker hands back is read as data: arrays without pickles, JSON, one line
for a failure; anything else is refused before it can run code in the runner."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fgl_workbench.attacks import AttackOutput
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.running.returned import (
    ARRAYS,
    FAILED,
    OUTPUT,
    ReturnError,
    read_output,
    write_failure,
    write_output,
)
from fgl_workbench.sandbox import SandboxError


class _Planted:
    """Unpickled, it creates a marker file: what a worker would send to run code here."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_an_output_comes_back_whole(tmp_path):
    out = AttackOutput(
        np.arange(4.0),
        0.5,
        {"counts": {"releases": 3}, "per_model": {"a": np.ones((2, 3))}, "order": "set"},
    )
    write_output(out, tmp_path)
    back = read_output(tmp_path, "plug")
    assert np.array_equal(back.scores, out.scores) and back.threshold == 0.5
    assert back.details["counts"] == {"releases": 3} and back.details["order"] == "set"
    assert np.array_equal(back.details["per_model"]["a"], np.ones((2, 3)))


def test_a_pickled_object_among_the_arrays_is_refused_unrun(tmp_path):
    marker = tmp_path / "ran"
    evil = np.empty(1, dtype=object)
    evil[0] = _Planted(marker)
    np.savez(tmp_path / ARRAYS, a0=evil)  # numpy pickles object arrays
    (tmp_path / OUTPUT).write_text(
        json.dumps({"scores": {"__array__": "a0"}, "threshold": None, "details": {}})
    )
    with pytest.raises(ReturnError, match="plug"):
        read_output(tmp_path, "plug")
    assert not marker.exists()
    assert pickle.loads(pickle.dumps(_Planted(marker))) is None and marker.exists()  # armed


@pytest.mark.parametrize(
    "skeleton",
    [
        {"scores": [1, 2], "threshold": None, "details": {}},  # scores not an array
        {"scores": {"__array__": "missing"}, "threshold": None, "details": {}},
        {"scores": {"__array__": "a0"}, "threshold": "high", "details": {}},
        {"scores": {"__array__": "a0"}, "threshold": None, "details": [], "more": 1},
    ],
)
def test_anything_but_an_output_is_one_error(tmp_path, skeleton):
    np.savez(tmp_path / ARRAYS, a0=np.zeros(3))
    (tmp_path / OUTPUT).write_text(json.dumps(skeleton))
    with pytest.raises(ReturnError) as refused:
        read_output(tmp_path, "plug")
    assert "\n" not in str(refused.value)


def test_a_link_in_place_of_the_output_is_not_followed(tmp_path):
    secret = tmp_path / "run.key"
    secret.write_text('{"scores": 1}')
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / OUTPUT).symlink_to(secret)
    with pytest.raises(ReturnError, match="no output.json"):
        read_output(scratch, "plug")


def test_failures_keep_their_meaning_in_one_line(tmp_path):
    write_failure(NotApplicableError("no edges to score"), tmp_path)
    with pytest.raises(NotApplicableError, match="no edges"):
        read_output(tmp_path, "plug")
    write_failure(SandboxError("kernel said no"), tmp_path)
    with pytest.raises(SandboxError, match="kernel said no"):
        read_output(tmp_path, "plug")
    write_failure(ValueError("bad\nthing"), tmp_path)
    with pytest.raises(ReturnError, match="plug failed in its worker: ValueError: bad thing"):
        read_output(tmp_path, "plug")
    (tmp_path / FAILED).write_text("[1, 2]")
    with pytest.raises(ReturnError, match="failed in its worker"):
        read_output(tmp_path, "plug")


def _written(folder: Path, counts: object) -> None:
    write_output(AttackOutput(np.arange(3.0), None, {}), folder)
    skeleton = json.loads((folder / OUTPUT).read_text())
    skeleton["details"] = {"counts": counts}
    (folder / OUTPUT).write_text(json.dumps(skeleton))


@pytest.mark.parametrize(
    "counts",
    [["not", "a", "mapping"], {f"k{i}": 1 for i in range(2_000)}, {"x": float("inf")}],
    ids=["a list", "2 000 names", "infinite"],
)
def test_counts_are_a_few_named_finite_numbers(tmp_path, counts):
    """The third review: counts as a list crashed the runner; 200 000 of them made one row's
    metrics too long for any reader of the folder."""
    _written(tmp_path, counts)
    with pytest.raises(ReturnError, match="its counts are not at most 64 names"):
        read_output(tmp_path, "plug")


def test_an_array_header_promising_more_than_it_holds_is_refused_unallocated(tmp_path):
    """The third review: an npy header declaring 10^15 elements over a few bytes was
    allocated before it was read (MemoryError in the runner)."""
    write_output(AttackOutput(np.arange(3.0), None, {}), tmp_path)
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**15,)}
    with open(tmp_path / "a0.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(np.zeros(3).tobytes())
    with zipfile.ZipFile(tmp_path / ARRAYS, "w") as archive:
        archive.write(tmp_path / "a0.npy", "a0.npy")
    with pytest.raises(ReturnError, match="header does not match its stored size"):
        read_output(tmp_path, "plug")


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_an_output_that_is_not_a_regular_file_is_refused_unread(tmp_path, kind):
    """A FIFO (or a link to one, or to /dev/zero) in place of the output would block or
    inflate the runner's read; it is refused without reading."""
    write_output(AttackOutput(np.arange(3.0), None, {}), tmp_path)
    (tmp_path / OUTPUT).unlink()
    if kind == "fifo":
        os.mkfifo(tmp_path / OUTPUT)
    else:
        (tmp_path / OUTPUT).symlink_to("/dev/zero")
    with pytest.raises(ReturnError, match="output.json"):
        read_output(tmp_path, "plug")


@pytest.mark.parametrize(
    ("skeleton", "refusal"),
    [
        (
            '{"scores": [], "threshold": null, "details": ' + '{"a": ' * 600 + "1" + "}" * 601,
            "nested too deeply",
        ),
        (
            '{"scores": [' + "[]," * 400_000 + '[]], "threshold": null, "details": {}}',
            "output.json exceeds",
        ),
    ],
    ids=["600 mappings deep", "a skeleton past 1 MiB"],
)
def test_a_skeleton_too_deep_or_too_large_is_one_line(tmp_path, skeleton, refusal):
    """The fourth review: details 600 mappings deep overflowed the runner's decoding
    (RecursionError); a 75 MB skeleton of empty lists took the runner to 4 GiB."""
    write_output(AttackOutput(np.arange(3.0), None, {}), tmp_path)
    (tmp_path / OUTPUT).write_text(skeleton)
    with pytest.raises(ReturnError, match=refusal):
        read_output(tmp_path, "plug")
