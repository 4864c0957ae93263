"""The fine-tuning stage: one that would never be scored is refused, not run as a silent
no-op; which epoch it keeps, with and without validation nodes."""

import pytest
import torch
from pydantic import ValidationError
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.targets.fine_tuning import StageConfig, Trained, fine_tuned


def test_a_stage_shorter_than_its_scoring_interval_is_refused():
    with pytest.raises(ValidationError, match="eval_every .* is above epochs"):
        StageConfig(epochs=20, eval_every=100)
    assert StageConfig(epochs=0).epochs == 0  # a skipped stage stays allowed
    assert StageConfig(epochs=100, eval_every=100).epochs == 100


def stage_run(val: bool, cfg: StageConfig) -> tuple[Trained, nn.Module]:
    torch.manual_seed(0)
    data = Data(
        x=torch.randn(40, 6),
        edge_index=torch.randint(0, 40, (2, 120)),
        y=torch.randint(0, 3, (40,)),
        train_mask=torch.arange(40) < 20,
        val_mask=(torch.arange(40) >= 20) & torch.tensor(val),
    )
    start = ModelSpec(ModelConfig(arch="gcn", dropout=0.0), 6, 3, "node").build()
    return fine_tuned(start, data, cfg), start


def test_the_kept_epoch_is_the_best_scored_one_and_without_validation_the_last():
    """With validation nodes the stage keeps its best-scored epoch (and says which); without
    them (a reference client's) it trains every epoch and keeps the last, never silently
    its starting weights."""
    cfg = StageConfig(lr=0.05, epochs=30, eval_every=5, patience=100)
    scored, start = stage_run(True, cfg)
    assert scored.epoch % 5 == 0 and 0 < scored.epoch <= 30
    # the weights kept are those of that epoch (training is deterministic: no dropout)
    replay, _ = stage_run(False, cfg.model_copy(update={"epochs": scored.epoch}))
    kept = zip(scored.model.state_dict().values(), replay.model.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in kept)
    blind, _ = stage_run(False, cfg)
    assert blind.epoch == 30
    moved = [
        not torch.equal(a, b)
        for a, b in zip(blind.model.state_dict().values(), start.state_dict().values(), strict=True)
    ]
    assert all(moved)
    longer, _ = stage_run(False, cfg.model_copy(update={"epochs": 31}))
    last = zip(longer.model.state_dict().values(), blind.model.state_dict().values(), strict=True)
    assert any(not torch.equal(a, b) for a, b in last)
