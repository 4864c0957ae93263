"""One seed drives everything. Torch's deterministic mode is switched on because CPU
scatter-adds (GNN message passing) otherwise vary with the thread count."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and torch; return a NumPy generator derived from ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    return np.random.default_rng(seed)


def derive_seed(seed: int, *labels: str | int) -> int:
    """A stable child seed for a named stage, so stages do not share random streams."""
    seq = np.random.SeedSequence([seed, *(_label_int(x) for x in labels)])
    return int(seq.generate_state(1)[0])


def _label_int(label: str | int) -> int:
    if isinstance(label, int):
        return label
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "little")
