"""The target interface: ``Target.fit(federation, config, defenses, seed) -> TrainedTarget``.

A trained target bundles everything an adversary might observe (released models behind a
query API, the transcript) with what only the evaluator sees (utility, per-client models),
and the privacy ledger its defenses wrote."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel
from torch import nn

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import Level
from fgl_workbench.data.federation import Federation
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelSpec
from fgl_workbench.query import ClientDeployments, QueryAPI
from fgl_workbench.registry import Registry, component
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.transcript import Transcript


@dataclass
class TrainedTarget:
    name: str
    level: Level
    global_model: nn.Module
    client_models: dict[int, nn.Module]
    spec: ModelSpec  # the released architecture
    recipe: TrainingRecipe  # its training settings
    query: QueryAPI
    transcript: Transcript
    ledger: PrivacyLedger
    utility: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    # node level: what the clients' deployments answer for their own nodes (link stealing's
    # view); None for targets that do not serve per-client posteriors
    served: ClientDeployments | None = None
    # parts of the released model beside the GNN (CE-FedGNN's edge head on its embeddings)
    heads: dict[str, nn.Module] = field(default_factory=dict)
    # secret key material every client holds (CeFGC+'s CKKS key), None without encryption
    keys: Any = None
    # for each client, the clients whose generators it received, in the order received
    # (CeFGC's shuffled round 2): for scoring only, no view carries it
    senders: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # every metric-DP release with the clean vector it was drawn from: for the evaluator's
    # re-identification audit only, no view carries it
    metric_releases: Any = None


class Target(Protocol):
    name: str
    level: str  # "node", "graph", or "any" for methods with both variants
    Config: type[BaseModel]

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget: ...


class PlansLedger(Protocol):
    """A target that can calibrate a defense's noise by ε (``fgl_workbench.running.calibration``)
    has ``planned_ledger``: the ledger ``fit`` will write for these defenses, before training, built
    by the same functions as the real one. Counts only training tells (rounds a Poisson-sampled
    client took part in, DP steps taken) are at their most, so the real ε is at most the planned
    one; only the defenses' noise may change the planned ledger's ε. Targets without it refuse
    ``target_epsilon``."""

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger: ...


def target_plugin(loaded: Any, where: str) -> Target:
    """A third-party target, checked against the interface (a class is instantiated)."""
    return component(
        loaded,
        where,
        {
            "level": (lambda v: v in ("node", "graph", "any"), "'node', 'graph' or 'any'"),
            "fit": (callable, "fit(federation, config, defenses, seed) -> TrainedTarget"),
        },
    )


TARGETS: Registry[Target] = Registry("target", "fgl_workbench.targets", target_plugin)


def check_node_target(
    name: str, federation: Federation, defenses: Sequence[Any], supported: Sequence[str], why: str
) -> None:
    """Refuse, naming the field, a graph-level federation or a defense a node-level method
    cannot apply (``why`` says why it supports only ``supported``)."""
    if federation.level != "node":
        raise ConfigError(f"targets.name: {name} is a node-level method (subgraph FL)")
    for d in defenses:
        if d.name not in supported:
            raise ConfigError(
                f"defenses: {name} cannot apply '{d.name}': {why}, so it supports only "
                + ", ".join(supported)
            )
