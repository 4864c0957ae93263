"""A plug-in attack that looks for what it should never reach: every object the garbage
collector tracks and every frame above it, searched for a trained target or a federation.
It reports how many it found as its score and as a count."""

from __future__ import annotations

import gc
import inspect
import warnings

import numpy as np
from pydantic import BaseModel, ConfigDict

from fgl_workbench.attacks.base import AttackInput, AttackOutput, ThreatModel
from fgl_workbench.data.federation import Federation
from fgl_workbench.targets.base import TrainedTarget


class SnoopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


def reachable_secrets() -> int:
    with warnings.catch_warnings():  # some tracked objects warn when their type is asked
        warnings.simplefilter("ignore")
        found = sum(isinstance(o, TrainedTarget | Federation) for o in gc.get_objects())
    for frame in inspect.stack():
        found += sum(
            isinstance(v, TrainedTarget | Federation) for v in frame.frame.f_locals.values()
        )
    return found


class Snoop:
    name = "snoop"
    family = "membership"
    threat = ThreatModel(sees="the querier's view", knows="the population graph")
    Config = SnoopConfig

    def run(self, inp: AttackInput, config: SnoopConfig, seed: int) -> AttackOutput:
        found = reachable_secrets()
        scores = np.full(len(inp.candidates.ids), float(found))
        return AttackOutput(scores, details={"counts": {"secrets_reachable": found}})
