"""The attack interface. An attack receives one ``AttackInput`` (the adversary's view, its
background knowledge and the candidates: records for membership, node pairs for links) and
returns one ``AttackOutput``. Nothing in the input carries membership labels, hidden
attributes or the edges asked about."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

import numpy as np
from pydantic import BaseModel

from fgl_workbench.adversary.candidates import Candidates, NodePairs
from fgl_workbench.registry import Registry, component


@dataclass(frozen=True)
class AttackInput:
    view: Any  # a fgl_workbench.adversary.threat view
    knowledge: Any  # fgl_workbench.adversary.threat.BackgroundKnowledge
    candidates: Candidates | NodePairs | np.ndarray  # records, node pairs, or client ids
    references: Any = None  # the cell's shared ReferencePool (attacks.membership.reference)


Family = Literal[
    "membership",
    "link",
    "distribution",
    "attribute",
    "client-data",
    "feature",
    "audit",
    "source",  # which member dataset each received generator came from
    "record-source",  # which client holds each training record (Hu et al.'s source inference)
]


@dataclass(frozen=True)
class AttackOutput:
    # one per candidate: higher = more likely a member (an edge, ...); for the distribution
    # family one row of class fractions per client; for reconstruction, one row of features
    # per reconstructed node
    scores: np.ndarray
    threshold: float | None = None  # decision threshold the adversary chose, if any
    # anything else the attack reports; details["counts"] (name → number, computed without
    # ground truth, e.g. generators recovered) is stored beside the metrics as attack_<name>
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ThreatModel:
    """Who the adversary is comes from the attack's config (``adversaries``); this says what
    it observes and what it knows besides. Shown in the threat-model table of the reference."""

    sees: str  # what its view holds
    knows: str  # its background knowledge


class Attack(Protocol):
    """``Config`` may declare ``adversary`` (querier, server or client); the runner hands the
    attack that party's view, the querier's when the config has no such field."""

    name: str
    family: Family  # what it infers: membership of records, edges between nodes, ...
    threat: ThreatModel  # what its adversary sees and knows (plug-ins may leave it out)
    Config: type[BaseModel]

    def run(self, inp: AttackInput, config: Any, seed: int) -> AttackOutput: ...


def attack_plugin(loaded: Any, where: str) -> Attack:
    """A third-party attack, checked against the interface (a class is instantiated)."""
    return component(
        loaded,
        where,
        {
            "family": (lambda v: v in get_args(Family), "one of " + ", ".join(get_args(Family))),
            "run": (callable, "run(inp: AttackInput, config, seed) -> AttackOutput"),
        },
    )


def _described(reference: str, where: str) -> Attack:
    """A third-party attack as a fenced process describes it: never imported here."""
    from fgl_workbench.attacks.plugins import described  # it builds on this module

    return described(reference, where)


ATTACKS: Registry[Attack] = Registry(
    "attack", "fgl_workbench.attacks", attack_plugin, load=_described
)
