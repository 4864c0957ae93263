"""Attack families. Each family owns its challenge (what its adversary is asked about), the
view and background knowledge its adversary gets, and its scorer, which alone holds the
ground truth. The runner asks an attack's family for the attack's inputs and never looks
inside; ground truth never leaves the family's scorer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, get_args

import numpy as np

from fgl_workbench.adversary.candidates import Candidates, NodePairs
from fgl_workbench.adversary.exchanged import ExchangedEmbeddings
from fgl_workbench.adversary.threat import (
    BackgroundKnowledge,
    InsiderView,
    View,
    client_view,
    insider_view,
    querier_view,
    server_view,
)
from fgl_workbench.attacks.base import Attack, AttackOutput
from fgl_workbench.attacks.metrics import ROC
from fgl_workbench.data.federation import Federation
from fgl_workbench.targets.base import TrainedTarget


@dataclass(frozen=True)
class CellInputs:
    """What a cell's attacks share, on the challenger's side: the trained target and the
    federation (ground truth included), the base background knowledge, the shared reference
    models, the cell's role seeds (``Streams.seed`` bound to its seed) and δ. Families build
    what several of their attacks ask for once (``shared``)."""

    trained: TrainedTarget
    federation: Federation
    knowledge: BackgroundKnowledge
    pool: Any  # fgl_workbench.attacks.membership.reference.ReferencePool
    seeds: Callable[..., int]
    delta: float = 1e-5
    _shared: dict[Any, Any] = field(default_factory=dict)

    def shared(self, key: Any, build: Callable[[], Any]) -> Any:
        """``build()`` the first time ``key`` is asked for, the same object afterwards."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]


Score = Callable[[AttackOutput], tuple[dict[str, Any], ROC | None]]
Records = tuple[np.ndarray, np.ndarray, np.ndarray, float]


@dataclass(frozen=True)
class FamilyInputs:
    """An attack's view, knowledge and candidates, and the family's scorer for its output
    (a closure over the ground truth, which the attack never receives)."""

    view: View
    knowledge: BackgroundKnowledge
    candidates: Candidates | NodePairs | np.ndarray
    score: Score
    # the cell's shared reference models: only for attacks whose knowledge is the cell's base
    # knowledge (the pool caches datasets built from it, which other families must not reach)
    references: Any = None
    # each candidate's (ids, scores, is_member, threshold or NaN), kept beside the metrics
    # (``fgl_workbench.storage.records``); the membership family's
    records: Callable[[AttackOutput], Records] | None = None


class AttackFamily(Protocol):
    name: str

    def adversaries(self, config: type) -> tuple[str, ...]:
        """The parties an attack of this family can be run as (its config may choose)."""
        ...

    def inputs(self, attack: Attack, config: Any, cell: CellInputs) -> FamilyInputs: ...


def configured_adversaries(config: type) -> tuple[str, ...]:
    """The choices of a config's ``adversary`` field; the querier's when it has none."""
    declared = config.model_fields.get("adversary")  # type: ignore[attr-defined]
    return get_args(declared.annotation) if declared is not None else ("querier",)


def hops_of(config: Any) -> int:
    """The neighbourhood size the attack queries nodes with (0: the node alone)."""
    return int(getattr(config, "hops", 0))


def adversary_view(config: Any, cell: CellInputs, knowledge: BackgroundKnowledge) -> View:
    """The view of the party the config names: the server, a client, or the querier."""
    trained, federation = cell.trained, cell.federation
    if getattr(config, "source", None) == "exchanged":
        return insider_view(trained, federation, "exchanged")
    adversary = getattr(config, "adversary", "querier")
    if adversary == "server":
        return server_view(trained, federation)
    if adversary == "client":
        return client_view(trained, federation, getattr(config, "client", 0))
    hops = (hops_of(config),)
    embeddings = getattr(config, "signal", None) == "embedding"  # else posteriors only
    if knowledge is not cell.knowledge:
        return querier_view(trained, federation, knowledge, hops, embeddings)
    return cell.shared(  # every querier attack of the cell at these hops sees the same answers
        ("querier", hops, embeddings),
        lambda: querier_view(trained, federation, knowledge, hops, embeddings),
    )


def exchanged_nodes(view: View) -> np.ndarray | None:
    """The nodes whose embeddings the view holds, when it reads exchanged embeddings: what
    the adversary is asked about must be among them (the released cohort is public)."""
    if isinstance(view, InsiderView) and isinstance(view.api, ExchangedEmbeddings):
        return view.api.nodes
    return None
