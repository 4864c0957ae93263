"""Defenses hook one stage of a target's pipeline and record their DP events in the ledger;
importing a module registers it. Imports only accountants, the shared modules, data and models."""

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
