"""A data root cannot run code: a poisoned Planetoid raw file and a planted processed file
are refused with one line, and the marker their code would write never appears."""

import pickle
import shutil

import pytest
import torch

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.safe_load import UnsafeDataError


class Marker:
    """Unpickling this runs ``open(path, 'w')``: the proof a loader ran the file's code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture
def cora_copy(tmp_path, data_root, monkeypatch):
    """Cora's raw files in a private data root and a private processing cache."""
    root = tmp_path / "data"
    shutil.copytree(data_root / "Cora" / "raw", root / "Cora" / "raw")
    monkeypatch.setenv("FGLWB_CACHE", str(tmp_path / "cache"))
    return root


def test_the_real_raw_files_load_through_the_restricted_reader(cora_copy):
    ds = load_dataset("Cora", root=cora_copy)
    assert ds.data.num_nodes == 2708


def test_a_poisoned_raw_file_is_refused(cora_copy, tmp_path):
    marker = tmp_path / "ran"
    with open(cora_copy / "Cora" / "raw" / "ind.cora.x", "wb") as f:
        pickle.dump(Marker(marker), f, protocol=2)
    refused = r"names '[a-z_.]*open', which no dataset file needs"
    with pytest.raises(UnsafeDataError, match=refused) as info:
        load_dataset("Cora", root=cora_copy)
    assert "\n" not in str(info.value) and "could not be downloaded" not in str(info.value)
    assert not marker.exists()


def test_a_planted_processed_file_is_refused(cora_copy, tmp_path):
    load_dataset("Cora", root=cora_copy)  # builds processed/ in the cache
    (processed,) = (tmp_path / "cache").rglob("processed/data.pt")
    marker = tmp_path / "ran"
    torch.save({"x": Marker(marker)}, processed)
    with pytest.raises(UnsafeDataError, match="processed file holding more than plain data"):
        load_dataset("Cora", root=cora_copy)
    assert not marker.exists()


def test_the_processing_cache_is_private(cora_copy, tmp_path):
    load_dataset("Cora", root=cora_copy)
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0


def test_a_cache_others_can_write_is_refused(cora_copy, tmp_path):
    """A co-tenant able to write the cache could plant processed files: such a cache is
    refused, not trusted."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache").chmod(0o777)
    with pytest.raises(UnsafeDataError, match="writable by others \\(mode 777\\)") as info:
        load_dataset("Cora", root=cora_copy)
    assert "\n" not in str(info.value)


def test_a_planted_pre_transform_file_is_refused(cora_copy, tmp_path):
    """PyG reads processed/pre_transform.pt with weights_only=False itself."""
    load_dataset("Cora", root=cora_copy)
    (processed,) = (tmp_path / "cache").rglob("processed/data.pt")
    marker = tmp_path / "ran"
    processed.unlink()  # so PyG processes again and reads pre_transform.pt
    torch.save(Marker(marker), processed.parent / "pre_transform.pt")
    with pytest.raises(UnsafeDataError, match="pre_transform.pt: a processed file"):
        load_dataset("Cora", root=cora_copy)
    assert not marker.exists()
