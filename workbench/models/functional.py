"""Small functional pieces shared by the backbones."""

from __future__ import annotations

import torch


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout. Same semantics as ``F.dropout``; a uniform mask is about 3× faster on
    CPU than torch's Bernoulli kernel, and dropout was the top entry in FedAvg's profile."""
    if not training or p == 0.0:
        return x
    return x * (torch.rand_like(x) >= p) / (1.0 - p)
