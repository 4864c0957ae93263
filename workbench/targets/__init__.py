"""Federated training methods, registered by name; importing a module registers it. Imports
accountants, the shared modules, data, models and defenses; never an adversary or attack."""

from fgl_workbench.targets import centralized, fedavg, gap  # noqa: F401
from fgl_workbench.targets.base import TARGETS, Target, TrainedTarget
from fgl_workbench.targets.cefedgnn import target as cefedgnn  # noqa: F401
from fgl_workbench.targets.cefgc import target as cefgc  # noqa: F401
from fgl_workbench.targets.fedgc import target as fedgc  # noqa: F401
from fgl_workbench.targets.fedtad import target as fedtad  # noqa: F401
from fgl_workbench.targets.flower import target as flower  # noqa: F401
from fgl_workbench.targets.opfgl import target as opfgl  # noqa: F401

__all__ = ["TARGETS", "Target", "TrainedTarget"]
