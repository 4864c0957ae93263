"""Whom an ε protects: the privacy unit, the neighbouring relation and the adversaries.

An (ε, δ) is a statement about two neighbouring datasets and one observer. The same run can be
(2, 1e-5)-DP for a querier of the released model (who does not see which clients were sampled,
so amplification by subsampling holds) and not DP at all for the server that adds the noise.
Every event a target records states its ``Scope``; ``NoGuarantee`` records a channel through
which a party sees private data without noise, so that party's ε is ∞ with the reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

Adversary = Literal["server", "clients", "querier"]
ADVERSARIES: tuple[Adversary, ...] = get_args(Adversary)
# client: all of one client's data; record: one training graph (graph level) or one node's own
# row (node level, without its edges); node: a node with its features, label and edges; edge:
# one undirected edge
Unit = Literal["client", "node", "record", "edge"]
UNITS: tuple[Unit, ...] = get_args(Unit)  # coarsest first
# a guarantee for a unit holds for every part of it
CONTAINS: dict[str, frozenset[str]] = {
    "client": frozenset(UNITS),
    "node": frozenset({"node", "edge"}),
    "record": frozenset({"record"}),
    "edge": frozenset({"edge"}),
}
ADVERSARY_NAMES = {
    "server": "the server",
    "clients": "other clients",
    "querier": "a querier of the released model",
}


@dataclass(frozen=True)
class Scope:
    """``unit`` and ``neighbouring`` say which datasets are neighbours; ``adversaries`` whom
    the event's guarantee holds against (the others see this mechanism's output with a
    different, or no, guarantee, recorded in an event of their own)."""

    unit: Unit
    neighbouring: str
    adversaries: tuple[Adversary, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unit: expected one of {', '.join(UNITS)} (got {self.unit!r})")
        bad = [a for a in self.adversaries if a not in ADVERSARIES]
        if bad or not self.adversaries:
            raise ValueError(
                f"adversaries: expected a non-empty list of {', '.join(ADVERSARIES)} "
                f"(got {list(self.adversaries)!r})"
            )
        object.__setattr__(self, "adversaries", tuple(sorted(set(self.adversaries))))

    def applies(self, adversary: str, unit: str) -> bool:
        """Whether this event speaks of ``unit`` to ``adversary``."""
        return adversary in self.adversaries and unit in CONTAINS[self.unit]


def everyone() -> tuple[Adversary, ...]:
    return ADVERSARIES


@dataclass(frozen=True)
class NoGuarantee:
    """A party sees something derived from private data without DP noise (the server that
    adds the noise itself sees the clean updates): ε = ∞ against it, with the reason."""

    reason: str
    scope: Scope
    metric: bool = False

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        return np.full(np.shape(orders), np.inf)


@dataclass(frozen=True)
class Caveat:
    """What an ε leaves out without voiding it (the released round was chosen on validation
    records, which that ε does not cover): carried into the note, adds no privacy loss."""

    reason: str
    scope: Scope
    metric: bool = False

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        return np.zeros(np.shape(orders))
