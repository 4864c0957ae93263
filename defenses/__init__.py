"""Defenses hook one stage of a target's pipeline and record their DP events in the ledger.
Importing a module registers it."""

from fgl_workbench.defenses import (  # noqa: F401
    aggregation_perturbation,
    dp_fedavg,
    dp_sgd,
    gaussian_upload,
    information_bottleneck,
    masked_aggregation,
    metric_dp,
    secure_aggregation,
    statistics_noise,
)
from fgl_workbench.defenses.base import (
    DEFENSES,
    AppliedDefense,
    Defense,
    PrivacyUnit,
    applied,
    covers,
    privacy_units,
)

__all__ = [
    "DEFENSES",
    "AppliedDefense",
    "Defense",
    "PrivacyUnit",
    "applied",
    "covers",
    "privacy_units",
]
