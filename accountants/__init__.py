"""Privacy accounting. Pure math lives in ``fgl_workbench.accountants.analysis``; the ledger, events
and accountant functions here are the stateful-looking (but immutable) layer on top. Imports
nothing of the workbench; every part may import it (docs/design.md)."""

from fgl_workbench.accountants.accountant import (
    AdversaryEpsilon,
    PrivacyReport,
    calibrate,
    calibrate_sigma,
    delta,
    epsilon,
    epsilons_by_adversary,
    largest_finite_epsilon,
    max_steps,
    metric_epsilons_by_adversary,
    subsampled_gaussian_grid,
)
from fgl_workbench.accountants.events import (
    Composed,
    Gaussian,
    Laplace,
    MetricGaussian,
    SubsampledGaussian,
)
from fgl_workbench.accountants.ledger import PrivacyLedger
from fgl_workbench.accountants.metric import metric_epsilon, rho_knn_percentile
from fgl_workbench.accountants.scope import ADVERSARIES, UNITS, Caveat, NoGuarantee, Scope

__all__ = [
    "ADVERSARIES",
    "UNITS",
    "AdversaryEpsilon",
    "Caveat",
    "NoGuarantee",
    "Scope",
    "epsilons_by_adversary",
    "largest_finite_epsilon",
    "Composed",
    "Gaussian",
    "Laplace",
    "MetricGaussian",
    "PrivacyLedger",
    "PrivacyReport",
    "SubsampledGaussian",
    "calibrate",
    "calibrate_sigma",
    "delta",
    "epsilon",
    "max_steps",
    "metric_epsilon",
    "metric_epsilons_by_adversary",
    "rho_knn_percentile",
    "subsampled_gaussian_grid",
]
