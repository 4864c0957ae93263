"""Model states between server and clients: the shared part a client uploads and loads (without
the modules it keeps), weighted updates for secure aggregation, and their average."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from fgl_workbench.defenses.dp_fedavg import (
    update_vector,
)
from fgl_workbench.errors import ConfigError


def shared_part(state: dict[str, torch.Tensor], keep_local: Sequence[str]) -> dict:
    """The entries of a model's state outside the modules its client keeps to itself."""
    return {k: v for k, v in state.items() if k.split(".", 1)[0] not in keep_local}


def load_shared(model: nn.Module, state: dict, keep_local: Sequence[str]) -> None:
    """Loads ``state`` into ``model``: every parameter but those of the modules its client
    keeps (all of them without ``keep_local``), and nothing else."""
    result = model.load_state_dict(state, strict=False)
    missing = {k.split(".", 1)[0] for k in result.missing_keys}
    if result.unexpected_keys or not missing <= set(keep_local):
        raise RuntimeError(
            f"a shared state must hold every module but {sorted(keep_local)}: missing "
            f"{result.missing_keys}, unexpected {result.unexpected_keys}"
        )


def check_kept_modules(keep_local: Sequence[str], model: nn.Module) -> None:
    """``keep_local`` names modules of ``model`` and leaves one to share."""
    if not keep_local:
        return
    modules = [n for n, _ in model.named_children()]
    unknown = sorted(set(keep_local) - set(modules))
    if unknown:
        raise ConfigError(
            f"keep_local: {', '.join(unknown)} is not a module of the model "
            f"(expected some of: {', '.join(modules)})"
        )
    if set(modules) <= set(keep_local):
        raise ConfigError("keep_local: every module is kept local, nothing is shared")


def weighted_update(local: dict, reference: dict, weight: float) -> torch.Tensor:
    """weight · (local − reference), followed by the weight itself: summed over clients, the
    last entry is the denominator of the weighted mean (so no weight travels in the clear)."""
    update = update_vector(local, reference) * weight
    return torch.cat([update, torch.tensor([weight], dtype=torch.float64)])


def average_states(states: Sequence[dict[str, torch.Tensor]], weights: np.ndarray) -> dict:
    """The weighted mean of ``states``; the plain mean where every weight is 0 (no chosen
    client held a training record: each sent back the model it received)."""
    total = float(weights.sum())
    share = weights / total if total > 0 else np.full(len(weights), 1.0 / len(weights))
    w = torch.tensor(share, dtype=torch.float32)
    return {k: sum(wi * s[k].float() for wi, s in zip(w, states, strict=True)) for k in states[0]}
