"""Mask-based secure aggregation: the pairwise masks cancel in the ring sum, one masked vector
is uniform on the ring whatever it carries, and a sum that would wrap is refused."""

import numpy as np
import pytest
from scipy.stats import kstest

from defenses.masked_aggregation import (
    MaskedAggConfig,
    MaskingClient,
    decode,
    encode,
    ring_sum,
)
from workbench.errors import ConfigError

CFG = MaskedAggConfig(fraction_bits=24)


def parties(k, seed=0):
    rng = np.random.default_rng(seed)
    clients = [MaskingClient(i, rng) for i in range(k)]
    return clients, [c.public for c in clients]


def test_masks_cancel_in_the_sum():
    clients, publics = parties(5)
    rng = np.random.default_rng(1)
    vectors = [rng.normal(0, 50, 1000) for _ in clients]
    masked = [c.masked(encode(v, CFG, 5), publics) for c, v in zip(clients, vectors, strict=True)]
    total = decode(ring_sum(masked), CFG)
    assert np.abs(total - np.sum(vectors, 0)).max() <= 5 * 2.0**-25
    assert not np.array_equal(masked[0], encode(vectors[0], CFG, 5))


def test_one_masked_vector_is_uniform_on_the_ring_whatever_it_carries():
    clients, publics = parties(3)
    for plain in (np.zeros(4000), np.full(4000, 7.0), np.arange(4000.0)):
        masked = clients[1].masked(encode(plain, CFG, 3), publics)
        share = masked.astype(np.float64) / 2.0**64
        assert kstest(share, "uniform").pvalue > 1e-3


def test_a_sum_that_could_wrap_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="fraction_bits"):
        encode(np.array([2.0**40]), CFG, 10)
