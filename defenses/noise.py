"""The one place the defenses draw their Gaussian noise (Opacus draws DP-SGD's in its own
``_generate_noise``). Keeping it in one function makes the mechanisms easy to read and lets an
audit replace it with a deliberately broken one (``fgl_workbench.audits.breaks``) to show it is
caught."""

from __future__ import annotations

import torch


def gaussian(
    shape: torch.Size | tuple[int, ...],
    std: float,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """N(0, std²) of ``shape``, drawn from ``generator``."""
    return std * torch.randn(shape, generator=generator, dtype=dtype)
