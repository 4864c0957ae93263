"""Privacy events: immutable records of one DP mechanism applied some number of times.

Each event knows its RDP curve; a ledger composes events by adding curves (Mironov 2017,
Prop. 1). Parameters are validated on construction, so a bad σ or q fails where it is recorded,
naming the field, rather than as a NaN in a report. An event recorded by a target carries the
``Scope`` it protects (unit, neighbouring relation, adversaries); events built by hand for the
calculator may leave it out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fgl_workbench.accountants.analysis import rdp as analysis
from fgl_workbench.accountants.scope import Caveat, NoGuarantee, Scope


def _positive(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a finite number > 0 (got {value!r})")


def _count(name: str, value: int) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name}: expected a whole number >= 0 (got {value!r})")


@dataclass(frozen=True)
class Gaussian:
    """Gaussian noise of std ``sigma`` on a query of L2 sensitivity ``sensitivity``, ``count``
    times."""

    sigma: float
    sensitivity: float = 1.0
    count: int = 1
    metric: bool = False
    scope: Scope | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        _positive("sigma", self.sigma)
        _positive("sensitivity", self.sensitivity)
        _count("count", self.count)

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        return self.count * analysis.gaussian(self.sigma / self.sensitivity, orders)


@dataclass(frozen=True)
class SubsampledGaussian:
    """DP-SGD style: Poisson sampling at rate ``q``, noise multiplier ``sigma`` (std divided by
    the clipping norm), ``steps`` steps."""

    q: float
    sigma: float
    steps: int
    metric: bool = False
    scope: Scope | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.q, int | float) or not 0 < self.q <= 1:
            raise ValueError(f"q: expected a sampling rate in (0, 1] (got {self.q!r})")
        _positive("sigma", self.sigma)
        _count("steps", self.steps)

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        return self.steps * analysis.subsampled_gaussian(self.q, self.sigma, orders)[0]


@dataclass(frozen=True)
class Laplace:
    """Laplace noise of scale ``b`` on a query of L1 sensitivity ``sensitivity``, ``count``
    times."""

    b: float
    sensitivity: float = 1.0
    count: int = 1
    metric: bool = False
    scope: Scope | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        _positive("b", self.b)
        _positive("sensitivity", self.sensitivity)
        _count("count", self.count)

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        return self.count * analysis.laplace(self.b / self.sensitivity, orders)


@dataclass(frozen=True)
class MetricGaussian:
    """Gaussian noise N(0, σ0² I) on an L2-normalised embedding, released ``releases`` times.

    Metric-DP (CE-FedGNN, Theorem 3.6): two embeddings at L2 distance ≤ ρ are indistinguishable
    with RDP releases · α ρ² / (2 σ0²). Its ε therefore depends on ρ, which the accountant
    takes as an argument."""

    sigma0: float
    releases: int
    metric: bool = True
    scope: Scope | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        _positive("sigma0", self.sigma0)
        _count("releases", self.releases)

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        if rho is None:
            raise ValueError("rho: metric-DP events need the distance rho to account")
        _positive("rho", rho)
        return self.releases * analysis.gaussian(self.sigma0 / rho, orders)


@dataclass(frozen=True)
class Composed:
    """Heterogeneous events applied together, the whole repeated ``count`` times."""

    events: tuple
    count: int = 1
    scope: Scope | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        _count("count", self.count)
        if not self.events:
            raise ValueError("events: a composition needs at least one event")

    @property
    def metric(self) -> bool:
        kinds = {e.metric for e in self.events}
        if len(kinds) > 1:
            raise ValueError("a composition mixes metric-DP and standard DP events")
        return kinds.pop()

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        return self.count * sum(e.rdp(orders, rho) for e in self.events)


Event = Gaussian | SubsampledGaussian | Laplace | MetricGaussian | Composed | NoGuarantee | Caveat
