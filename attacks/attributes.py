"""Node attributes an attribute-inference adversary targets, shared by the evaluator (truth)
and the adversary (its auxiliary pool), so both read a feature column the same way."""

from __future__ import annotations

import numpy as np


def attribute_values(column: np.ndarray) -> np.ndarray:
    """A feature column as a binary attribute: itself when 0/1, else above its median."""
    if set(np.unique(column).tolist()) <= {0.0, 1.0}:
        return column.astype(np.int64)
    return (column > np.median(column)).astype(np.int64)
