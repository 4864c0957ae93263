"""Sorted int64 pair keys answer what np.unique and np.isin answer."""

import numpy as np
import pytest

from fgl_workbench.data.pair_keys import sorted_contains, sorted_unique


@pytest.mark.parametrize("size", [0, 1, 1000])
def test_sorted_unique_is_np_unique(size):
    keys = np.random.default_rng(size).integers(0, 300, size)
    assert np.array_equal(sorted_unique(keys), np.unique(keys))


@pytest.mark.parametrize("size", [0, 1, 1000])
def test_sorted_contains_is_np_isin(size):
    rng = np.random.default_rng(size)
    table, keys = np.unique(rng.integers(0, 300, size)), rng.integers(-5, 310, 500)
    assert np.array_equal(sorted_contains(table, keys), np.isin(keys, table))
