"""The registered ``fedavg`` target: refuses defenses that do not fit, then runs the node- or
graph-level loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.federation import Federation
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.fedavg.config import SUPPORTED_DEFENSES, FedAvgConfig
from fgl_workbench.targets.fedavg.graph import GraphFedAvg
from fgl_workbench.targets.fedavg.node import NodeFedAvg
from fgl_workbench.targets.fedavg.rounds import FedAvgLoop


class FedAvg:
    """Dispatches to the node- or graph-level loop by the federation's level."""

    name = "fedavg"
    level = "any"
    Config = FedAvgConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        return self._level(federation, defenses).fit(federation, config, defenses, seed)

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """``fit``'s ledger before training (``FedAvgLoop.planned_ledger``), refused as ``fit``
        refuses."""
        return self._level(federation, defenses).planned_ledger(federation, config, defenses)

    @staticmethod
    def _level(federation: Federation, defenses: Sequence[Any]) -> FedAvgLoop:
        """The loop for the federation's level, once the defenses are known to fit it."""
        for d in defenses:
            if d.name not in SUPPORTED_DEFENSES:
                raise ConfigError(
                    f"defenses: fedavg cannot apply '{d.name}' (stage '{d.stage}'); "
                    f"it supports: {', '.join(SUPPORTED_DEFENSES)}"
                )
        names = {d.name for d in defenses}
        dp_kinds = sorted(names & {"dp-fedavg", "dp-sgd", "gaussian-upload"})
        if len(dp_kinds) > 1:
            raise ConfigError(
                f"defenses: {' and '.join(dp_kinds)} protect different neighbouring datasets "
                "(one client's data against the aggregate, one record, one client's data "
                "against the server); their ε do not compose into one figure, so run them as "
                "separate targets"
            )
        for name in ("information-bottleneck", "metric-dp"):
            if name in names and federation.level != "node":
                raise ConfigError(
                    f"defenses: {name} acts on node features or node embeddings and needs "
                    "node-level data (the federation is graph-level)"
                )
        if "dp-sgd" in names and federation.level == "node":
            raise ConfigError(
                "defenses: dp-sgd on fedavg is graph-level only (nodes of one graph are not "
                "independent records, so per-node clipping bounds nothing); node-level DP needs "
                "aggregation perturbation (GAP), which is not implemented yet"
            )
        return NodeFedAvg() if federation.level == "node" else GraphFedAvg()


TARGETS.register("fedavg")(FedAvg())
