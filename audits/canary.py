"""The canary game every audit plays, and its result.

m canaries are each included with probability 1/2 (or, under a replace-one neighbouring
relation, take one of two values), the real mechanism runs on them, and the auditor scores
each canary from what its adversary observed. Ranking the scores and guessing the extremes
gives a lower bound on ε that holds with the stated confidence (Steinke, Nasr & Jagielski
2023, ``accountants.analysis.audit``); it is compared with the accountant's ε for the same
adversary, privacy unit and mechanism parameters. A bound above the claim means the mechanism
leaks more than its ledger says (or the accountant is wrong): the audit has failed it."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import torch

from accountants import PrivacyLedger, epsilon
from accountants.accountant import OrderGridWarning
from accountants.analysis.audit import OneRunAudit, one_run_epsilon_from_scores
from audits.observer import Observed, scores

CANARY_NORM = 10.0  # canary updates and gradients are this many clips long: clipping must act


@dataclass(frozen=True)
class Trial:
    """One audited claim: the canaries' scores under each statistic the observer computed
    (higher: more likely included), which were included (the challenger's secret), and the
    ledger of what the mechanism claims against ``adversaries`` for ``unit`` (``rho``: the
    distance a metric-DP claim is read at)."""

    scores: Mapping[str, np.ndarray]
    included: np.ndarray
    claim: PrivacyLedger
    adversaries: tuple[str, ...]
    unit: str
    mechanism: str
    rho: float | None = None


def trial(
    observed: Observed,
    included: torch.Tensor,
    events: Sequence[Any],
    unit: str,
    mechanism: str,
    rho: float | None = None,
) -> Trial:
    """A trial whose claim is ``events`` (all stating the same adversaries), scored from
    everything the adversary observed (``audits.observer``)."""
    return Trial(
        scores(observed),
        included.numpy(force=True),
        PrivacyLedger(tuple(events)),
        events[0].scope.adversaries,
        unit,
        mechanism,
        rho,
    )


@dataclass(frozen=True)
class CanaryAudit:
    """A lower bound on ε from one canary game, beside the accountant's ε for the same claim
    and the ceiling: the largest ε these canaries could certify at this confidence (every
    guess right), so a bound under the claim is never read as the claim being tight."""

    defense: str
    adversaries: tuple[str, ...]
    unit: str
    mechanism: str
    claimed: float
    bound: OneRunAudit
    seconds: float
    statistic: str
    ceiling: float

    @property
    def lower_bound(self) -> float:
        return self.bound.epsilon

    @property
    def holds(self) -> bool:
        """The bound stays at or under the claim (it fails with probability ≤ 1 − confidence
        on a correct mechanism)."""
        return self.lower_bound <= self.claimed

    @property
    def certifiable(self) -> bool:
        """Whether these canaries can certify any ε > 0 at all at this confidence."""
        return self.ceiling > 0

    def summary(self) -> str:
        verdict = "holds" if self.holds else "VIOLATED"
        found = (
            f"ε ≥ {self.lower_bound:.3f}" if self.certifiable else "not certifiable at this size"
        )
        return (
            f"{self.defense} against {'/'.join(self.adversaries)} ({self.unit}): "
            f"{found} at {self.bound.confidence:.1%} confidence "
            f"({self.statistic}: {self.bound.correct}/{self.bound.guesses} guesses on "
            f"{self.bound.canaries} canaries; ceiling {self.ceiling:.3f}) vs claimed "
            f"ε = {self.claimed:.3f}: {verdict}"
        )


def judged(
    defense: str, trial: Trial, delta: float, seconds: float, confidence: float = 0.95
) -> CanaryAudit:
    """The trial's one-run bound at ``delta`` under its best statistic, each statistic tested
    at ``confidence`` split between them (Bonferroni), and the ledger's ε for its claim."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        claimed = epsilon(trial.claim, delta, rho=trial.rho).epsilon
    each = 1 - (1 - confidence) / len(trial.scores)
    found = {
        name: one_run_epsilon_from_scores(s, trial.included, delta, each)
        for name, s in trial.scores.items()
    }
    statistic = max(found, key=lambda name: found[name].epsilon)
    best = replace(found[statistic], confidence=confidence)
    perfect = one_run_epsilon_from_scores(trial.included.astype(float), trial.included, delta, each)
    return CanaryAudit(
        defense,
        trial.adversaries,
        trial.unit,
        trial.mechanism,
        claimed,
        best,
        seconds,
        statistic,
        perfect.epsilon,
    )


def inclusion(m: int, generator: torch.Generator) -> torch.Tensor:
    """Each canary in (True) or out with probability 1/2, independently."""
    return torch.rand(m, generator=generator) < 0.5


def directions(m: int, dimension: int, generator: torch.Generator) -> torch.Tensor:
    """m independent uniformly random unit vectors in R^dimension (float64): nearly
    orthogonal to each other and to anything else in high dimension."""
    d = torch.randn(m, dimension, generator=generator, dtype=torch.float64)
    return d / d.norm(dim=1, keepdim=True)


def flips(releases: int, m: int, generator: torch.Generator) -> torch.Tensor:
    """[releases, m] ±1 (float64): the sign of each canary's contribution in each release,
    the auditor's secret pattern (reused noise then cancels in the changes)."""
    return torch.randint(0, 2, (releases, m), generator=generator).double() * 2 - 1


NULLS = 64  # null directions the observer measures each release's noise on


def numpy_rng(generator: torch.Generator) -> np.random.Generator:
    """A numpy stream drawn from ``generator``, for the targets' numpy samplers."""
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))


@dataclass(frozen=True)
class Context:
    """What one run fixed about its mechanisms: its ledger (steps, hops, release counts),
    every defense's config, the size of the released model's parameter vector, for
    metric-DP the ρ its ε is read at, and the target's config (sampling rate, rounds)."""

    ledger: PrivacyLedger
    configs: Mapping[str, Any]
    dimension: int
    rho: float | None = None
    target: Mapping[str, Any] = field(default_factory=dict)


class Game(Protocol):
    """One defense's canary game: ``play`` runs the defense's own mechanism code, at
    ``config``, on m canaries and returns one trial per claim it audits, scored from every
    release the claim's adversary observes; the claim is always the ledger of ``config``.
    A deliberately broken mechanism (``audits.breaks``) is the same code patched."""

    defense: str

    def play(
        self, config: Any, context: Context, m: int, generator: torch.Generator
    ) -> list[Trial]: ...
