"""Seeds: one per role, none derivable from another. Torch's deterministic mode is switched on
because CPU scatter-adds (GNN message passing) otherwise vary with the thread count."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import secrets
from dataclasses import dataclass, field

import numpy as np
import torch


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python, NumPy and torch; return a NumPy generator derived from ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    # deterministic mode also fills every new tensor with NaN, a debugging aid that cost 39 %
    # of a reference model's training time; no kernel here reads memory it did not write
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    return np.random.default_rng(seed)


def derive_seed(seed: int, *labels: str | int) -> int:
    """A stable child seed for a named stage, so stages do not share random streams."""
    seq = np.random.SeedSequence([seed, *(_label_int(x) for x in labels)])
    return int(seq.generate_state(1)[0])


def _label_int(label: str | int) -> int:
    if isinstance(label, int):
        return label
    return int.from_bytes(hashlib.sha256(label.encode()).digest()[:8], "little")


@dataclass(frozen=True)
class Streams:
    """A run's independent random streams, one per role (partition, target training and its
    DP noise, challenges, the canary audit, each attack).

    A role's seed is HMAC-SHA256 under the run key of (cell seed, role, labels). With a secret
    key (OS entropy, kept in the results folder so a resumed suite draws the same streams) an
    attack holding its own seed can derive neither the key nor any other role's seed: brute
    force over the public suite seed finds nothing. A reproducible run has no key: every
    stream follows from the public seed (``public_seed``), and the store marks the run."""

    key: bytes = field(repr=False)

    @classmethod
    def fresh(cls) -> Streams:
        return cls(secrets.token_bytes(32))

    @classmethod
    def public(cls) -> Streams:
        return cls(b"")

    @property
    def reproducible(self) -> bool:
        return not self.key

    def seed(self, seed: int, role: str, *labels: str | int) -> int:
        """A 63-bit seed for ``role`` of the cell with public seed ``seed``."""
        if self.reproducible:
            return public_seed(seed, role, *labels)
        message = json.dumps([seed, role, *labels]).encode()  # unambiguous, unlike a join
        digest = hmac.new(self.key, message, hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "little") >> 1


def public_seed(seed: int, role: str, *labels: str | int) -> int:
    """A role's seed from the public seed alone, as every run made before run keys drew it
    (so published numbers replay): training takes the cell's seed itself, an attack the
    seed derived from its key, every other role the seed derived from its name."""
    if role == "target":
        return seed
    if role == "attack":
        return derive_seed(seed, *labels)
    return derive_seed(seed, role, *labels)
