"""Where a cell's tensors live: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

A cell runs inside ``on_device``: PyTorch's default device is set for its duration, so every
model, tensor and random generator the targets, attacks and defenses create is made on the
chosen device without each of them passing it around, and the dataset is moved there once
(``fgl_workbench.data.datasets.to_device``), never per batch. Work that needs the CPU (CKKS,
scikit-learn, numpy) reads tensors through ``.numpy(force=True)``. The same seed gives the same
numbers on the CPU; a GPU draws from its own generator and its kernels round differently
(docs/performance.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fgl_workbench.errors import ConfigError

if TYPE_CHECKING:
    import torch


def resolve_device(spec: str, field: str = "--device") -> torch.device:
    """The device ``spec`` names; ``auto`` is the first visible GPU, else the CPU. A GPU that
    is not there is an error naming ``field``, not a silent fallback."""
    import torch

    text = str(spec).strip().lower()
    if text == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ConfigError(f"{field}: expected auto, cpu, cuda or cuda:N (got {spec!r})")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    n = int(index or 0)
    if n >= count:
        seen = f"{count} GPU(s) visible" if count else "no GPU is visible to PyTorch"
        raise ConfigError(f"{field}: {spec!r} asked for GPU {n}, but {seen}")
    return torch.device("cuda", n)


@contextlib.contextmanager
def on_device(device: torch.device) -> Iterator[None]:
    """Within: tensors, modules and generators are created on ``device`` by default."""
    import torch

    previous = torch.get_default_device()
    if device == previous:  # already there: no mode intercepting every call (~10 % of a cell)
        yield
        return
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(previous)


def adopt_device(device: torch.device) -> None:
    """A worker process's default device for its whole life, set only where it is not already
    PyTorch's default: setting it installs a mode that intercepts every torch call, the cost
    ``on_device`` spares a cell on the CPU."""
    import torch

    if device != torch.get_default_device():
        torch.set_default_device(device)


def seeded_generator(seed: int) -> torch.Generator:
    """A seeded generator on the current default device (a CPU generator cannot draw CUDA
    tensors)."""
    import torch

    return torch.Generator(device=torch.get_default_device()).manual_seed(seed)
