"""FedAvg's configuration, the defenses it may be combined with, and what of it a training
recipe (which seeds the reference models) leaves out."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fgl_workbench.models import ModelConfig
from fgl_workbench.targets.fine_tuning import StageConfig
from fgl_workbench.targets.training import (
    ReleaseRule,
)
from fgl_workbench.transcript import (
    KeepPayloads,
)


class NeighbourSampling(BaseModel):
    """Mini-batch local training: ``batch_size`` training nodes per step, each with a
    neighbourhood sampled hop by hop (``fanouts[h]`` in-neighbours per node at hop h)."""

    model_config = ConfigDict(extra="forbid")
    fanouts: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        [10, 10], min_length=1, max_length=8
    )
    batch_size: int = Field(1024, ge=1, le=10_000_000)


class FedAvgConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: ModelConfig = ModelConfig()
    rounds: int = Field(100, ge=1, le=10_000)
    local_epochs: int = Field(3, ge=1, le=1000)
    lr: float = Field(0.01, gt=0.0, le=10.0)
    weight_decay: float = Field(5e-4, ge=0.0)
    optimizer: Literal["adam", "sgd"] = "adam"
    persistent_optimizer: bool = Field(
        True, description="keep each client's optimizer state across rounds (FedTAD's code)"
    )
    client_fraction: float = Field(1.0, gt=0.0, le=1.0)
    batch_size: int = Field(32, ge=1, description="graph level only")
    release: ReleaseRule | None = Field(
        None,
        description="best_val or last round's model; default best_val, last under a DP defense",
    )
    keep_payloads: KeepPayloads = "last_round"
    eval_dropout: bool = Field(
        False,
        description="official-compat: keep dropout on when scoring (FedTAD's code does; it "
        "explains most of the gap to that paper's FedAvg figures, see docs/reproduction.md)",
    )
    fine_tune: StageConfig | None = Field(
        None,
        description="node level: each client fine-tunes the released model on its own training "
        "nodes (early-stopped on its validation nodes) and deploys its personalised model",
    )
    sampling: NeighbourSampling | None = Field(
        None,
        description="node level: train each client on mini-batches of its training nodes "
        "with sampled neighbourhoods, for clients too large for full-batch training "
        "({fanouts: [10, 10], batch_size: 1024}: 1024 seeds per step, at most 10 "
        "in-neighbours per node per hop); none: full batch",
    )
    keep_local: list[str] = Field(
        default_factory=list,
        description="graph level: modules (by name: project, convs, head) each client keeps to "
        "itself, neither uploaded nor averaged; GCFL's code keeps [project, head]",
    )
    score_local_models: bool = Field(
        False,
        description="official-compat: also report local_* scores, each client's locally "
        "trained model of the best round on its own data (OpenFGL's default evaluation)",
    )

    @field_validator("keep_local")
    @classmethod
    def _one_order(cls, names: list[str]) -> list[str]:
        """The same modules in any order or repeated are the same setting (and recipe)."""
        return sorted(set(names))


# Secure aggregation changes the model only by its grid rounding, so references train without
# it rather than pay for encryption N times; metric-DP acts on the release, not the training.
NOT_IN_RECIPE = ("secure-aggregation", "metric-dp")


SUPPORTED_DEFENSES = (
    "dp-fedavg",
    "dp-sgd",
    "secure-aggregation",
    "information-bottleneck",
    "metric-dp",
    "gaussian-upload",
)


def recipe_excludes(cfg: FedAvgConfig) -> set[str]:
    """Fields left out of the recipe: how it is scored, and the options left off, so a
    recipe's identity (which seeds the reference models) is the one it had before they
    existed."""
    left_off = {n for n in ("fine_tune", "keep_local", "sampling") if not getattr(cfg, n)}
    return {"score_local_models"} | left_off
