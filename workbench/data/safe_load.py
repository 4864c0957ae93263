"""Reading a data root without running code from it.

A data root is untrusted input like a results folder. PyG reads Planetoid's raw files with
``pickle.load`` (a crafted ``Cora/raw/ind.cora.x`` ran code), and retries a ``processed/*.pt``
that ``torch.load(weights_only=True)`` refuses with ``weights_only=False`` (a planted file
ran code). While ``data_files_only()`` is active, the raw files are unpickled admitting only
the numpy/scipy/builtin types they hold, and processed files load as plain tensors or not at
all (a refused one is named; delete it and it is rebuilt from ``raw/``)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import fsspec
import torch

from fgl_workbench.errors import DatasetNotFoundError

# every global the Planetoid raw files (ind.*.x/tx/allx/y/ty/ally/graph) name
ALLOWED = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("scipy.sparse.csr", "csr_matrix"),
        ("scipy.sparse._csr", "csr_matrix"),
        ("collections", "defaultdict"),
        ("builtins", "list"),
        ("__builtin__", "list"),
    }
)


class UnsafeDataError(DatasetNotFoundError):
    """A data file that is not plain data: refused, never run."""


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        raise UnsafeDataError(
            f"a raw data file names '{module}.{name}', which no dataset file needs: refused "
            "(the data root is not trusted; replace the file with the original)"
        )


class _RestrictedPickle:
    """Stands in for the ``pickle`` module inside PyG's Planetoid reader."""

    UnpicklingError = pickle.UnpicklingError

    @staticmethod
    def load(f: IO[bytes], encoding: str = "ASCII", **_: Any) -> Any:
        return _DataOnly(f, encoding=encoding).load()


def plain_torch_load(path: str, map_location: Any = None) -> Any:
    """A processed file as plain tensors, never retried with ``weights_only=False``."""
    try:
        with fsspec.open(path, "rb") as f:
            return torch.load(f, map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise UnsafeDataError(
            f"{path}: a processed file holding more than plain data: refused (delete it and it "
            "is rebuilt from raw/)"
        ) from None


def refuse_unsafe_processed(processed: Path) -> None:
    """PyG reads ``pre_transform.pt`` and ``pre_filter.pt`` with ``weights_only=False``
    itself, outside ``fs.torch_load``: each present must load as plain data first."""
    for name in ("pre_transform.pt", "pre_filter.pt"):
        if (processed / name).is_file():
            plain_torch_load(str(processed / name))


@contextmanager
def data_files_only() -> Iterator[None]:
    """PyG's readers, restricted to plain data for as long as the block runs."""
    import torch_geometric.io.fs as fs
    import torch_geometric.io.planetoid as planetoid

    saved = planetoid.pickle, fs.torch_load
    planetoid.pickle, fs.torch_load = _RestrictedPickle, plain_torch_load  # type: ignore[assignment]
    try:
        yield
    finally:
        planetoid.pickle, fs.torch_load = saved
