"""The defense interface: a defense names the pipeline stage it hooks and carries a typed
config; a target applies the defenses whose stage it has and refuses the others, so a suite can
never report a defense that did not run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from workbench.registry import Registry

Stage = Literal["data", "local_training", "upload", "aggregation", "message_passing", "release"]


class Defense(Protocol):
    name: str
    stage: Stage
    Config: type[BaseModel]


@dataclass(frozen=True)
class AppliedDefense:
    """A defense with its validated config, as a target receives it."""

    name: str
    stage: Stage
    config: Any


DEFENSES: Registry[Defense] = Registry("defense")


def applied(name: str, params: dict[str, Any]) -> AppliedDefense:
    defense = DEFENSES.get(name, field="defenses.name")
    return AppliedDefense(name, defense.stage, defense.Config(**params))
