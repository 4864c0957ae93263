"""Calibration by ε: a defense's ``target_epsilon`` turned into the noise multiplier σ its
target trains with, before training (Opacus's ``make_private_with_epsilon``, for a ledger).

The σ comes from the ledger the target will write, not from a formula kept beside it: a target
that supports calibration has ``planned_ledger(federation, config, defenses)``, built by the
same functions as the ledger ``fit`` writes after training, with every count only training
tells (rounds a Poisson-sampled client took part in, DP steps taken) at its most. Only σ
varies, so a bisection on σ (``fgl_workbench.accountants.calibrate``) finds the smallest σ whose
planned ledger meets the target; the real ledger's ε is at most the planned one.

Which ε: every (adversary, unit) row the ledger states (``epsilons_by_adversary``). The
largest finite row meets the target; a row that is ∞ whatever σ (the server that adds the
noise in central DP-FedAvg, a ``NoGuarantee``) stays ∞, as the report shows. A target that
cannot be met by any σ (only ∞ rows, or a fixed part of the ledger already above it) is
refused, as are two calibrated defenses on one target (which σ should move is ambiguous)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fgl_workbench.accountants import PrivacyLedger, calibrate, largest_finite_epsilon
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses.base import AppliedDefense
from fgl_workbench.defenses.calibration import calibrating, target_epsilon, with_noise
from fgl_workbench.errors import ConfigError


@dataclass(frozen=True)
class Calibration:
    """What a target trains with: ``defenses`` with the calibrated σ in place of
    ``target_epsilon``; ``noise_multiplier`` is that σ (None when nothing was calibrated) and
    ``planned_epsilon`` the largest finite ε of the planned ledger at σ."""

    defenses: list[AppliedDefense]
    noise_multiplier: float | None = None
    planned_epsilon: float | None = None
    target_epsilon: float | None = None


def refusal(target: Any, calibrated: Sequence[str]) -> str | None:
    """Why ``target`` cannot calibrate the defenses named in ``calibrated`` (those given
    ``target_epsilon``), None when it can."""
    if len(calibrated) > 1:
        return (
            f"target_epsilon is given on {' and '.join(calibrated)}: calibrating more than one "
            "noise multiplier of a target is ambiguous; give all but one noise_multiplier"
        )
    if calibrated and not callable(getattr(target, "planned_ledger", None)):
        name = getattr(target, "name", type(target).__name__)
        return (
            f"target {name} cannot plan its ledger before training (no planned_ledger), "
            f"so {calibrated[0]}'s noise cannot be calibrated by ε; give noise_multiplier"
        )
    return None


def calibrate_defenses(
    target: Any,
    federation: Federation,
    config: Any,
    defenses: Sequence[AppliedDefense],
    delta: float,
) -> Calibration:
    """The defenses ``target`` trains with on ``federation``: as given, or with the one that
    carries ``target_epsilon`` given the smallest σ whose planned ledger's largest finite ε is
    at most that target at ``delta``."""
    found = calibrating(defenses)
    if not found:
        return Calibration(list(defenses))
    why = refusal(target, [defenses[j].name for j in found])
    if why:
        raise ConfigError(f"defenses: {why}")
    j = found[0]
    goal = target_epsilon(defenses[j])
    assert goal is not None

    def planned(sigma: float) -> PrivacyLedger:
        trial = list(defenses)
        trial[j] = with_noise(defenses[j], sigma)
        return target.planned_ledger(federation, config, trial)

    try:
        sigma = calibrate(planned, goal, delta, per_adversary=True)
    except ValidationError:
        raise
    except ValueError as exc:
        raise ConfigError(
            f"defenses[{j}].params.target_epsilon: {target.name} with {defenses[j].name} cannot "
            f"reach ε ≤ {goal} at δ = {delta}: {exc}"
        ) from None
    resolved = list(defenses)
    resolved[j] = with_noise(defenses[j], sigma)
    reached = largest_finite_epsilon(planned(sigma), delta)
    return Calibration(resolved, sigma, reached, goal)


def check_met(calibration: Calibration, epsilons: Sequence[dict[str, Any]]) -> None:
    """After training: the real ledger's rows (``epsilons_by_adversary``) must meet the target
    the σ was calibrated for. A row above it means the planned ledger drifted from the one the
    target wrote, a bug that would let a run exceed its budget: refused, not stored."""
    goal = calibration.target_epsilon
    if goal is None:
        return
    finite = [r["epsilon"] for r in epsilons if math.isfinite(r["epsilon"])]
    worst = max(finite, default=math.inf)
    if worst > goal * (1 + 1e-9):
        raise RuntimeError(
            f"the trained ledger's largest finite ε is {worst} > target_epsilon {goal} at the "
            f"calibrated σ = {calibration.noise_multiplier}: its planned ledger does not match "
            "the ledger it wrote"
        )
