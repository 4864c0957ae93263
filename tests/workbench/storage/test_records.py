import io
import os

import numpy as np
import pytest

from fgl_workbench.errors import ConfigError
from fgl_workbench.storage.records import ScoredRecords, read_records, write_records


def saved(tmp_path, **arrays):
    path = tmp_path / "r.records.npz"
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def good():
    return {
        "ids": np.arange(4),
        "scores": np.linspace(0, 1, 4),
        "is_member": np.array([1, 0, 1, 0], bool),
        "threshold": np.float64(0.5),
    }


def test_records_come_back_as_written(tmp_path):
    records = ScoredRecords(np.array([7, 3]), np.array([0.2, 0.9]), np.array([False, True]))
    path = tmp_path / "a.npz"
    with open(path, "wb") as f:
        write_records(f, records)
    back = read_records(path)
    assert back.ids.tolist() == [7, 3] and back.scores.tolist() == [0.2, 0.9]
    assert back.is_member.tolist() == [False, True] and np.isnan(back.threshold)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"extra": np.zeros(2)}, "exactly the arrays"),
        ({"scores": np.zeros(3)}, "field scores"),
        ({"is_member": np.zeros(4)}, "field is_member"),
        ({"threshold": np.zeros(2)}, "field threshold"),
        ({"ids": np.array(["a", "b", "c", "d"])}, "field ids"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_field(tmp_path, change, field):
    with pytest.raises(ConfigError, match=field):
        read_records(saved(tmp_path, **{**good(), **change}))


class Touch:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = ""


def test_a_pickled_array_is_refused_and_runs_nothing(tmp_path):
    """Reading never runs code: an object array (pickled inside the .npy) is refused before
    anything is unpickled, and the marker its payload would create never appears."""
    global MARKER
    MARKER = str(tmp_path / "ran")
    arrays = good()
    arrays["scores"] = np.array([Touch(), 1.0, 2.0, 3.0], dtype=object)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path = tmp_path / "evil.npz"
    path.write_bytes(buf.getvalue())
    assert b"posix" in buf.getvalue() or b"system" in buf.getvalue()  # the payload is there
    with pytest.raises(ConfigError, match="not stored records"):
        read_records(path)
    assert not (tmp_path / "ran").exists()
