"""The ε of a model a user trained with Opacus, from its accountant's history, stated the way
the workbench states its own: per privacy unit, against the party it protects from (a querier
of the released model: DP-SGD's guarantee covers the weights, and so every answer they give).

Graph level, each training graph is one per-sample gradient that Opacus clips, so its
(q, σ, steps) bound a graph's influence: ε per graph. Node level, a node's features and edges
also enter its neighbours' losses through message passing, so one node moves many clipped
per-sample gradients and the clipping norm bounds none of them: no finite ε holds for a node
(or its row) from Opacus's history alone, and the audit says ∞ with that reason rather than
Opacus's number."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fgl_workbench.accountants import (
    AdversaryEpsilon,
    NoGuarantee,
    PrivacyLedger,
    Scope,
    SubsampledGaussian,
    epsilons_by_adversary,
)
from fgl_workbench.errors import ConfigError

PER_GRAPH = Scope("record", "add or remove one training graph", ("querier",))
PER_NODE = Scope("node", "add or remove one node with its edges", ("querier",))
MESSAGE_PASSING = (
    "Opacus clips each node's own loss gradient, but a GNN's node also enters its neighbours' "
    "losses through message passing: one node changes many clipped gradients, so the noise "
    "bounds none of its influence (a node-level guarantee needs GAP or a degree-bounded DP-GNN)"
)


def opacus_history(privacy: Any) -> list[tuple[float, float, int]]:
    """``(noise_multiplier, sample_rate, steps)`` per phase of training, from an Opacus
    ``PrivacyEngine``, its accountant, or the accountant's ``history`` itself."""
    history = getattr(getattr(privacy, "accountant", privacy), "history", privacy)
    try:
        steps = [(float(s), float(q), int(n)) for s, q, n in history]
    except (TypeError, ValueError):
        raise ConfigError(
            "privacy: expected an Opacus PrivacyEngine, its accountant, or the accountant's "
            "history [(noise_multiplier, sample_rate, steps), ...]"
        ) from None
    if not steps:
        raise ConfigError("privacy: the accountant's history is empty (no private step taken)")
    return steps


def opacus_defense(privacy: Any) -> list[dict[str, Any]]:
    """DP training as a results folder's cell states it: Opacus's history, phase by phase
    (none where the model was not trained privately)."""
    if privacy is None:
        return []
    history = [list(phase) for phase in opacus_history(privacy)]
    return [{"name": "opacus", "params": {"history": history}}]


def opacus_epsilons(privacy: Any, level: str, delta: float) -> tuple[AdversaryEpsilon, ...]:
    """ε against the querier, per graph (graph level) or ∞ per node (node level)."""
    history = opacus_history(privacy)
    if level != "graph":
        events: Sequence[Any] = [NoGuarantee(MESSAGE_PASSING, PER_NODE)]
    elif any(sigma == 0 for sigma, _, _ in history):
        events = [NoGuarantee("a training phase added no noise (noise_multiplier 0)", PER_GRAPH)]
    else:
        try:
            events = [
                SubsampledGaussian(q, sigma, steps, scope=PER_GRAPH) for sigma, q, steps in history
            ]
        except ValueError as exc:
            raise ConfigError(f"privacy: the accountant's history holds {exc}") from None
    ledger = PrivacyLedger()
    for e in events:
        ledger = ledger.record(e)
    return tuple(r for r in epsilons_by_adversary(ledger, delta) if r.adversary == "querier")


def epsilon_lines(epsilons: Sequence[AdversaryEpsilon]) -> list[str]:
    """One sentence per claimed ε, ∞ with its reason."""
    return [
        f"claimed (RDP accounting of Opacus's history): ε = {e.epsilon:.3g} per {_unit(e.unit)} "
        "against "
        f"a querier, at δ = {e.delta:g}"
        if e.epsilon != float("inf")
        else f"claimed: ε = ∞ per {_unit(e.unit)} against a querier: {e.note}"
        for e in epsilons
    ]


def _unit(unit: str) -> str:
    return "graph" if unit == "record" else unit
