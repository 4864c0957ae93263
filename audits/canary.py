"""The canary game every audit plays, and its result.

m canaries are each included with probability 1/2 (or, under a replace-one neighbouring
relation, take one of two values), the real mechanism runs on them, and the auditor scores
each canary from every release its adversary observed (``audits.observer``). Ranking the
scores and guessing the extremes gives lower bounds on ε and on a Gaussian-DP μ that hold with
the stated confidence (Steinke, Nasr & Jagielski 2023; Mahloujifar, Melis & Chaudhuri 2025;
``accountants.analysis.audit``), and an f-DP test of the claim's whole privacy profile; they
are compared with the accountant's ε for the same adversary, privacy unit and mechanism
parameters. A bound above the claim, or a rejected profile, means the mechanism leaks more
than its ledger says (or the accountant is wrong): the audit has failed it."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from fgl_workbench.accountants import Gaussian, MetricGaussian, PrivacyLedger, epsilon
from fgl_workbench.accountants.accountant import OrderGridWarning, privacy_profile
from fgl_workbench.accountants.analysis.audit import (
    AuditBounds,
    InverseBlowUp,
    audit_bounds,
    rejects_curve,
)
from fgl_workbench.accountants.analysis.independent import HeldOutTest, held_out_test
from fgl_workbench.accountants.pld import PLDUnavailable, pld_deltas
from fgl_workbench.audits.observer import Observed, combined

CANARY_NORM = 10.0  # canary updates and gradients are this many clips long: clipping must act


@dataclass(frozen=True)
class Trial:
    """One audited claim: the canaries' scores from everything the observer saw (higher:
    more likely included), which were included (the challenger's secret), and the ledger of
    what the mechanism claims against ``adversaries`` for ``unit`` (``rho``: the distance a
    metric-DP claim is read at). ``independent``: nothing couples the canaries (each its own
    coordinate, noise and sampling draw), so they are independent runs of the mechanism and
    the held-out many-runs test applies beside the one-run bounds."""

    scores: np.ndarray
    included: np.ndarray
    claim: PrivacyLedger
    adversaries: tuple[str, ...]
    unit: str
    mechanism: str
    rho: float | None = None
    independent: bool = False


def trial(
    observed: Observed,
    included: torch.Tensor,
    events: Sequence[Any],
    unit: str,
    mechanism: str,
    rho: float | None = None,
    independent: bool = False,
) -> Trial:
    """A trial whose claim is ``events`` (all stating the same adversaries), scored from
    everything the adversary observed (``audits.observer``)."""
    return Trial(
        combined(observed),
        included.numpy(force=True),
        PrivacyLedger(tuple(events)),
        events[0].scope.adversaries,
        unit,
        mechanism + (", independent coordinate canaries" if independent else ""),
        rho,
        independent,
    )


@dataclass(frozen=True)
class CanaryAudit:
    """One canary game's verdict on a claim. ``rejected``: the guesses are too good for any
    mechanism with the claim's privacy profile (its δ(ε) at every ε, as a trade-off curve),
    by the f-DP one-run test, or by the held-out test where the canaries are independent;
    ``bounds``: the one-run lower bounds on ε (Steinke–Nasr–Jagielski and f-DP at the run's
    δ) and on a Gaussian-DP μ, each with its ceiling (the most these canaries could certify:
    a bound under the claim is never read as the claim being tight); ``held_out``: the
    many-runs test's bounds where it applies. Every test of one audit shares
    ``confidence``."""

    defense: str
    adversaries: tuple[str, ...]
    unit: str
    mechanism: str
    claimed: float
    bounds: AuditBounds
    rejected: bool
    confidence: float
    seconds: float
    held_out: HeldOutTest | None = None

    @property
    def lower_bound(self) -> float:
        return max(self.bounds.steinke.epsilon, self.bounds.fdp_epsilon, *self._held("epsilon"))

    @property
    def ceiling(self) -> float:
        b = self.bounds
        return max(b.steinke_ceiling, b.fdp_ceiling, *self._held("epsilon_ceiling"))

    @property
    def mu(self) -> float:
        return max([self.bounds.mu, *self._held("mu")])

    @property
    def mu_ceiling(self) -> float:
        return max([self.bounds.mu_ceiling, *self._held("mu_ceiling")])

    def _held(self, name: str) -> tuple[float, ...]:
        return () if self.held_out is None else (getattr(self.held_out, name),)

    @property
    def holds(self) -> bool:
        """Neither the claim's profile is rejected nor a bound exceeds the claimed ε (each
        fails with probability ≤ 1 − confidence on a correct mechanism)."""
        return not self.rejected and self.lower_bound <= self.claimed

    @property
    def certifiable(self) -> bool:
        """Whether these canaries can certify any ε > 0 at all at this confidence."""
        return self.bounds.certifiable or self.ceiling > 0

    def summary(self) -> str:
        verdict = "holds" if self.holds else "VIOLATED"
        b = self.bounds
        found = (
            f"ε ≥ {self.lower_bound:.3f}, μ ≥ {self.mu:.3f}"
            if self.certifiable
            else "not certifiable at this size"
        )
        return (
            f"{self.defense} against {'/'.join(self.adversaries)} ({self.unit}): "
            f"{found} at {self.confidence:.1%} confidence ("
            f"{b.steinke.correct}/{b.steinke.guesses} guesses on {b.canaries} canaries; "
            f"ceiling ε {self.ceiling:.3f}, μ {self.mu_ceiling:.3f}) vs claimed "
            f"ε = {self.claimed:.3f}{'; profile rejected' if self.rejected else ''}: {verdict}"
        )


PROFILE_POINTS = 48  # ε values the claim's privacy profile is read at


@functools.lru_cache(maxsize=64)  # every game of one configuration tests the same claim
def claimed_deltas(
    claim: PrivacyLedger, top: float, rho: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """The claim's privacy profile (ε grid, δ(ε)) around ``top``, its ε at the run's δ: a
    mechanism that is (ε, δ(ε))-DP at every ε of a grid is f-DP for the largest of their
    curves f_{ε,δ(ε)}, so a test of that curve tests the whole claim, not one (ε, δ) point of
    it. δ(ε) is the smaller of the RDP accountant's and the PLD accountant's (both valid; PLD
    is exact for Gaussian releases); a metric-DP release at distance ρ is the Gaussian
    mechanism of sensitivity ρ."""
    grid = np.linspace(0.0, max(3.0 * top, 1.0), PROFILE_POINTS)
    deltas = privacy_profile(claim, grid, rho=rho)
    with contextlib.suppress(PLDUnavailable):  # no PLD form: the RDP profile alone
        deltas = np.minimum(deltas, pld_deltas(_at_distance(claim, rho), grid.tolist()))
    return grid, deltas


def claimed_profile(claim: PrivacyLedger, top: float, rho: float | None) -> InverseBlowUp:
    """The claim's trade-off curve as the f-DP one-run test reads it (``claimed_deltas``)."""
    grid, deltas = claimed_deltas(claim, top, rho)
    grow = np.exp(np.minimum(grid, 700.0))  # e^700: past every trade-off's reach

    def inverse(y: float) -> float:
        return float(np.max(np.maximum(1 - deltas - grow * (1 - y), (y - deltas) / grow)).clip(0))

    return inverse


def claimed_max_tpr(claim: PrivacyLedger, top: float, rho: float | None):
    """The highest TPR the claim allows any test at each FPR α: min over its profile of
    e^ε·α + δ(ε) and 1 − e^−ε·(1 − δ(ε) − α) (the held-out test reads the curve this way)."""
    grid, deltas = claimed_deltas(claim, top, rho)
    grow = np.exp(np.minimum(grid, 700.0))

    def max_tpr(alpha: np.ndarray) -> np.ndarray:
        a = np.asarray(alpha, dtype=float)[..., None]
        bound = np.minimum(grow * a + deltas, 1 - (1 - deltas - a) / grow)
        return bound.min(-1).clip(0.0, 1.0)

    return max_tpr


def _at_distance(claim: PrivacyLedger, rho: float | None) -> PrivacyLedger:
    """The claim with each metric-DP release read at ``rho`` as a Gaussian of sensitivity ρ."""
    return PrivacyLedger(
        tuple(
            Gaussian(e.sigma0, rho, e.releases) if isinstance(e, MetricGaussian) else e
            for e in claim.events
        )
    )


def judged(
    defense: str, trial: Trial, delta: float, seconds: float, confidence: float = 0.95
) -> CanaryAudit:
    """The trial's bounds and the f-DP test of the claim's profile, and where the canaries are
    independent the held-out test, the tests (Steinke's ε, the f-DP ε, μ, the profile, the
    held-out test) at ``confidence`` split between them (Bonferroni), beside the ledger's ε."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        claimed = epsilon(trial.claim, delta, rho=trial.rho).epsilon
    each = 1 - (1 - confidence) / (5 if trial.independent else 4)
    finite = bool(np.isfinite(claimed))
    rejected = finite and rejects_curve(
        trial.scores, trial.included, claimed_profile(trial.claim, claimed, trial.rho), each
    )
    held_out = None
    if trial.independent:
        max_tpr = claimed_max_tpr(trial.claim, claimed if finite else 1.0, trial.rho)
        held_out = held_out_test(trial.scores, trial.included, max_tpr, delta, each)
        rejected = rejected or (finite and held_out.rejected)
    return CanaryAudit(
        defense,
        trial.adversaries,
        trial.unit,
        trial.mechanism,
        claimed,
        audit_bounds(trial.scores, trial.included, delta, each),
        rejected,
        confidence,
        seconds,
        held_out,
    )


def inclusion(m: int, generator: torch.Generator) -> torch.Tensor:
    """Each canary in (True) or out with probability 1/2, independently."""
    return torch.rand(m, generator=generator) < 0.5


def directions(m: int, dimension: int, generator: torch.Generator) -> torch.Tensor:
    """m independent uniformly random unit vectors in R^dimension (float64): nearly
    orthogonal to each other and to anything else in high dimension."""
    d = torch.randn(m, dimension, generator=generator, dtype=torch.float64)
    return d / d.norm(dim=1, keepdim=True)


NULLS = 64  # null directions the observer measures each release's noise on


def canary_directions(
    m: int, dimension: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(canaries' directions [m, dimension], null directions [NULLS, dimension], whether the
    canaries are independent). Where the vector has room, each canary and each null
    direction is its own coordinate, drawn at random: nothing then couples the canaries
    (no canary's contribution shows in another's evidence), so the held-out many-runs test
    applies. Otherwise random unit vectors, nearly orthogonal: one-run bounds only."""
    if m + NULLS > dimension:
        return directions(m, dimension, generator), directions(NULLS, dimension, generator), False
    coordinates = torch.randperm(dimension, generator=generator)[: m + NULLS]
    unit = torch.zeros(m + NULLS, dimension, dtype=torch.float64)
    unit[torch.arange(m + NULLS), coordinates] = 1.0
    return unit[:m], unit[m:], True


def flips(releases: int, m: int, generator: torch.Generator) -> torch.Tensor:
    """[releases, m] ±1 (float64): the sign of each canary's contribution in each release,
    the auditor's secret pattern (reused noise then cancels in the changes)."""
    return torch.randint(0, 2, (releases, m), generator=generator).double() * 2 - 1


def numpy_rng(generator: torch.Generator) -> np.random.Generator:
    """A numpy stream drawn from ``generator``, for the targets' numpy samplers."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))


@dataclass(frozen=True)
class Context:
    """What one run fixed about its mechanisms: its ledger (steps, hops, release counts),
    every defense's config, the size of the released model's parameter vector, for
    metric-DP the ρ its ε is read at, and the target's name and config (sampling rate,
    rounds)."""

    ledger: PrivacyLedger
    configs: Mapping[str, Any]
    dimension: int
    rho: float | None = None
    target: Mapping[str, Any] = field(default_factory=dict)
    target_name: str = ""  # whose code ran the mechanism (flower: Flower's own DP code)


class Game(Protocol):
    """One defense's canary game: ``play`` runs the defense's own mechanism code, at
    ``config``, on m canaries and returns one trial per claim it audits, scored from every
    release the claim's adversary observes; the claim is always the ledger of ``config``.
    A deliberately broken mechanism (``audits.breaks``) is the same code patched."""

    defense: str

    def play(
        self, config: Any, context: Context, m: int, generator: torch.Generator
    ) -> list[Trial]: ...
