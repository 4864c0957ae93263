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
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from accountants import PrivacyLedger, epsilon
from accountants.accountant import OrderGridWarning
from accountants.analysis.audit import OneRunAudit, one_run_epsilon_from_scores

CANARY_NORM = 10.0  # canary updates and gradients are this many clips long: clipping must act


@dataclass(frozen=True)
class Trial:
    """One audited claim: the canaries' scores (higher: more likely included), which were
    included (the challenger's secret), and the ledger of what the mechanism claims against
    ``adversaries`` for ``unit`` (``rho``: the distance a metric-DP claim is read at)."""

    scores: np.ndarray
    included: np.ndarray
    claim: PrivacyLedger
    adversaries: tuple[str, ...]
    unit: str
    mechanism: str
    rho: float | None = None


def trial(
    scores: torch.Tensor,
    included: torch.Tensor,
    events: Sequence[Any],
    unit: str,
    mechanism: str,
    rho: float | None = None,
) -> Trial:
    """A trial whose claim is ``events`` (all stating the same adversaries)."""
    return Trial(
        scores.numpy(force=True),
        included.numpy(force=True),
        PrivacyLedger(tuple(events)),
        events[0].scope.adversaries,
        unit,
        mechanism,
        rho,
    )


@dataclass(frozen=True)
class CanaryAudit:
    """A lower bound on ε from one canary game, beside the accountant's ε for the same claim."""

    defense: str
    adversaries: tuple[str, ...]
    unit: str
    mechanism: str
    claimed: float
    bound: OneRunAudit
    seconds: float

    @property
    def lower_bound(self) -> float:
        return self.bound.epsilon

    @property
    def holds(self) -> bool:
        """The bound stays at or under the claim (it fails with probability ≤ 1 − confidence
        on a correct mechanism)."""
        return self.lower_bound <= self.claimed

    def summary(self) -> str:
        verdict = "holds" if self.holds else "VIOLATED"
        return (
            f"{self.defense} against {'/'.join(self.adversaries)} ({self.unit}): "
            f"ε ≥ {self.lower_bound:.3f} at {self.bound.confidence:.1%} confidence "
            f"({self.bound.correct}/{self.bound.guesses} guesses on {self.bound.canaries} "
            f"canaries) vs claimed ε = {self.claimed:.3f}: {verdict}"
        )


def judged(
    defense: str, trial: Trial, delta: float, seconds: float, confidence: float = 0.95
) -> CanaryAudit:
    """The trial's one-run bound at ``delta`` and the ledger's ε for its claim."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        claimed = epsilon(trial.claim, delta, rho=trial.rho).epsilon
    bound = one_run_epsilon_from_scores(trial.scores, trial.included, delta, confidence)
    return CanaryAudit(
        defense, trial.adversaries, trial.unit, trial.mechanism, claimed, bound, seconds
    )


def inclusion(m: int, generator: torch.Generator) -> torch.Tensor:
    """Each canary in (True) or out with probability 1/2, independently."""
    return torch.rand(m, generator=generator) < 0.5


def directions(m: int, dimension: int, generator: torch.Generator) -> torch.Tensor:
    """m independent uniformly random unit vectors in R^dimension (float64): nearly
    orthogonal to each other and to anything else in high dimension."""
    d = torch.randn(m, dimension, generator=generator, dtype=torch.float64)
    return d / d.norm(dim=1, keepdim=True)


def broken_scale(clip: float, noise_multiplier: float) -> tuple[float, float]:
    """(clip, noise multiplier) of a deliberately broken mechanism: noise 10× smaller than
    (clip, σ) says, clipping off (a clip no canary reaches)."""
    off = 1e6 * clip
    return off, noise_multiplier * clip / 10.0 / off


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
    """One defense's canary game: ``play`` runs the defense's own mechanism code with
    ``mechanism`` (the config as stated, or a deliberately broken one) on m canaries and
    returns one trial per claim it audits; the claim is always the ledger of ``config``."""

    defense: str

    def play(
        self, config: Any, context: Context, mechanism: Any, m: int, generator: torch.Generator
    ) -> list[Trial]: ...

    def broken(self, config: Any) -> Any:
        """The same mechanism with noise 10× smaller than ``config`` states and no clipping."""
        ...
