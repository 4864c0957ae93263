"""A fine-tuning stage that would never be scored is refused, not run as a silent no-op."""

import pytest
from pydantic import ValidationError

from workbench.targets.fine_tuning import StageConfig


def test_a_stage_shorter_than_its_scoring_interval_is_refused():
    with pytest.raises(ValidationError, match="eval_every .* is above epochs"):
        StageConfig(epochs=20, eval_every=100)
    assert StageConfig(epochs=0).epochs == 0  # a skipped stage stays allowed
    assert StageConfig(epochs=100, eval_every=100).epochs == 100
