"""How a trained cell becomes its store row."""

import math

import numpy as np
import torch

from fgl_workbench.running.cell import stored_history


def test_the_stored_history_keeps_each_rounds_numbers_and_its_index():
    """A plug-in target's history may hold anything: its numbers are stored (numpy's and NaN
    too), its other entries left out rather than stop the cell at writing, and a round that
    did not say which it was gets its index."""
    given = [
        {"round": 0, "train_loss": np.float32(1.5), "val_accuracy": math.nan, "done": True},
        {"logits": torch.ones(2), "note": "warm-up", "val_accuracy": 0.5, "skipped": None},
    ]
    first, second = stored_history(given)
    assert first.keys() == {"round", "train_loss", "val_accuracy"}
    assert first["train_loss"] == 1.5 and math.isnan(first["val_accuracy"])
    assert second == {"round": 1, "val_accuracy": 0.5}
