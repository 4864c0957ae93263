"""Node attributes an attribute-inference adversary targets, shared by the evaluator (truth)
and the adversary (its auxiliary pool), so both read a feature column the same way."""

from __future__ import annotations

import numpy as np

from fgl_workbench.errors import NotApplicableError

EMPTY_POOL = "the auxiliary pool is empty: no value of the attribute is known"


def attribute_values(column: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """A feature column as a binary attribute: itself when 0/1, else above the median of the
    ``pool``'s values (the auxiliary pool: the values the adversary knows, so its labels and
    the scorer's truth are cut at one threshold it could compute)."""
    if set(np.unique(column).tolist()) <= {0.0, 1.0}:
        return column.astype(np.int64)
    if not pool.size:
        raise NotApplicableError(EMPTY_POOL)
    return (column > np.median(column[pool])).astype(np.int64)
