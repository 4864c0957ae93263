"""A DP defense's noise given by the ε it should reach: ``target_epsilon`` instead of
``noise_multiplier`` (as Opacus's ``make_private_with_epsilon``).

A defense whose (ε, δ) guarantee is driven by one noise multiplier σ declares both fields; its
config then holds either σ as written or the ε to calibrate it to, never both. The σ itself is
found before training (``fgl_workbench.running.calibration``) from the ledger the target will write,
and the target trains with a config where ``noise_multiplier`` is that σ and ``target_epsilon`` is
gone, so every model, recipe and audit downstream sees the σ, never the target.

``target_epsilon`` is left out of the config's repr: a reference model's seed derives from its
recipe's text (``TrainingRecipe.identity``), which must not change for configs written before
the field existed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from fgl_workbench.defenses.base import DEFENSES, AppliedDefense, applied
from fgl_workbench.errors import ConfigError

CALIBRATED = "noise_multiplier"  # the parameter target_epsilon calibrates
TARGET_EPSILON = "target_epsilon"


def target_epsilon_field() -> Any:
    """The ``target_epsilon`` field every calibratable config declares."""
    return Field(
        None,
        gt=0.0,
        repr=False,
        description="instead of noise_multiplier: σ is calibrated before training so that the "
        "run's largest finite ε over adversaries and units (rows ∞ at any σ stay ∞) is at most "
        "this, at the suite's delta",
    )


class NoiseOrEpsilon(BaseModel):
    """A config whose ``noise_multiplier`` may instead be given as ``target_epsilon``."""

    @model_validator(mode="before")
    @classmethod
    def _not_both(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get(TARGET_EPSILON) is not None and CALIBRATED in data:
            raise PydanticCustomError(
                "noise_or_epsilon",
                "target_epsilon: give noise_multiplier or target_epsilon, not both "
                "(target_epsilon calibrates noise_multiplier)",
            )
        return data


def calibratable(name: str) -> bool:
    """Whether defense ``name`` accepts ``target_epsilon``."""
    return TARGET_EPSILON in DEFENSES.get(name, field="defenses.name").Config.model_fields


def refusal(name: str) -> str:
    """Why defense ``name`` cannot be calibrated by ε (it has no ``target_epsilon``)."""
    defense = DEFENSES.get(name, field="defenses.name")
    why = getattr(defense, "no_target_epsilon", None)
    if why:
        return why
    try:
        unit = defense.privacy_unit(defense.Config())
    except ValidationError:  # a plug-in whose config has required fields
        unit = "unknown"
    if unit is None:
        return "it gives no (ε, δ) guarantee, so there is no ε to calibrate"
    return "it has no noise multiplier that target_epsilon could calibrate"


def target_epsilon(d: AppliedDefense) -> float | None:
    """The ε the defense asks its σ to be calibrated to; None when σ is given."""
    return getattr(d.config, TARGET_EPSILON, None)


def calibrating(defenses: Sequence[AppliedDefense]) -> list[int]:
    """Indices of the defenses that carry ``target_epsilon``."""
    return [j for j, d in enumerate(defenses) if target_epsilon(d) is not None]


def with_noise(d: AppliedDefense, sigma: float) -> AppliedDefense:
    """``d`` as if written with ``noise_multiplier: sigma`` (validated again)."""
    params = d.config.model_dump(exclude={TARGET_EPSILON})
    return applied(d.name, {**params, CALIBRATED: sigma})


def require_noise(target: str, defenses: Sequence[AppliedDefense]) -> None:
    """Refuse to train with a defense whose σ is still to be calibrated: ``target_epsilon`` is
    resolved before ``fit`` (``fgl_workbench.running.calibration.calibrate_defenses``, which
    ``run_cell`` applies), so a config reaching a target with it would otherwise train at the
    default σ."""
    for j in calibrating(defenses):
        d = defenses[j]
        raise ConfigError(
            f"defenses[{j}].params.target_epsilon: {target} trains with a noise multiplier; "
            f"{d.name}'s target_epsilon={target_epsilon(d)} must be calibrated first "
            "(fgl_workbench.running.calibration.calibrate_defenses)"
        )
