"""The defense interface: a defense names the pipeline stage it hooks and carries a typed
config; a target applies the defenses whose stage it has and refuses the others, so a suite can
never report a defense that did not run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel

from fgl_workbench.accountants import ADVERSARIES, Caveat, PrivacyLedger, Scope
from fgl_workbench.accountants.scope import Unit
from fgl_workbench.registry import Registry, component

Stage = Literal["data", "local_training", "upload", "aggregation", "message_passing", "release"]
# what two neighbouring datasets differ in under the defense's ε (fgl_workbench.accountants.scope)
PrivacyUnit = Unit


class Defense(Protocol):
    name: str
    stage: Stage
    Config: type[BaseModel]

    def privacy_unit(self, config: Any) -> PrivacyUnit | None:
        """The unit the defense's ε protects; None when it gives no (ε, δ) guarantee."""
        ...


@dataclass(frozen=True)
class AppliedDefense:
    """A defense with its validated config, as a target receives it."""

    name: str
    stage: Stage
    config: Any


def defense_plugin(loaded: Any, where: str) -> Defense:
    """A third-party defense, checked against the interface (a class is instantiated)."""
    return component(
        loaded,
        where,
        {
            "stage": (lambda v: v in get_args(Stage), "one of " + ", ".join(get_args(Stage))),
            "privacy_unit": (callable, "privacy_unit(config) -> unit or None"),
        },
    )


DEFENSES: Registry[Defense] = Registry("defense", "fgl_workbench.defenses", defense_plugin)


def privacy_units(defenses: list[dict[str, Any]]) -> set[PrivacyUnit]:
    """Units protected by a cell's defenses (suite entries ``{name, params}``)."""
    units = set()
    for d in defenses:
        defense = DEFENSES.get(d["name"], field="defenses.name")
        unit = defense.privacy_unit(defense.Config(**d.get("params", {})))
        if unit is not None:
            units.add(unit)
    return units


# the units whose protection bounds what each attack family infers: a record's membership is
# covered by client-, record- and node-level DP; an edge by client-, node- and edge-level DP
COVERING_UNITS: dict[str, set[str]] = {
    "membership": {"client", "record", "node"},
    "link": {"client", "node", "edge"},
}


def covers(defenses: list[dict[str, Any]], family: str = "membership") -> bool:
    """Whether the cell's ε bounds what an attack of ``family`` infers (membership of one node
    or graph, one edge): edge-level DP alone does not bound membership, record-level DP-SGD
    does not bound an edge."""
    return bool(privacy_units(defenses) & COVERING_UNITS.get(family, set()))


def accounted(defenses: list[AppliedDefense] | Any) -> bool:
    """Whether any of a target's defenses writes privacy events (a DP mechanism), so that
    nothing else may touch private data outside the accountant (model selection)."""
    for d in defenses:
        defense = DEFENSES.get(d.name, field="defenses.name")
        if getattr(defense, "accounted", defense.privacy_unit(d.config) is not None):
            return True
    return False


def with_selection_caveat(ledger: PrivacyLedger, rule: str) -> PrivacyLedger:
    """The ledger of a run that released by ``rule``: after a best-validation choice every ε
    it states excludes the validation records (chosen on outside the accountant)."""
    if rule != "best_val":
        return ledger
    units = dict.fromkeys(e.scope.unit for e in ledger.standard().events if e.scope is not None)
    why = "excludes the validation records: the released round was chosen on them"
    caveats = tuple(Caveat(why, Scope(u, "model selection", ADVERSARIES)) for u in units)
    return PrivacyLedger(ledger.events + caveats)


def applied(name: str, params: dict[str, Any]) -> AppliedDefense:
    defense = DEFENSES.get(name, field="defenses.name")
    return AppliedDefense(name, defense.stage, defense.Config(**params))
