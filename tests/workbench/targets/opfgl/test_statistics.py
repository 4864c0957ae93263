"""O-pFGL's statistics: the sum form (what a secure sum reveals) equals the pooled statistics
of Eq. 8 and the unbiased variance of the concatenated rows; (n, μ, σ) and the sums convert
both ways."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fgl_workbench.targets.opfgl.statistics import (
    class_sums,
    pooled,
    pooled_direct,
    statistics_from_sums,
    sums_from_statistics,
)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 12), min_size=1, max_size=6),
    dims=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_sum_form_equals_pooled_statistics_and_the_concatenated_variance(sizes, dims, seed):
    rng = np.random.default_rng(seed)
    rows = [rng.normal(rng.normal(), 1 + rng.random(), (n, dims)) for n in sizes]
    per_client = [class_sums(r, np.zeros(len(r), int), 1, 2) for r in rows]
    total = per_client[0]
    for s in per_client[1:]:
        total = total + s
    by_sums = pooled(total)
    direct = pooled_direct([statistics_from_sums(s, dims) for s in per_client])
    everything = torch.from_numpy(np.concatenate(rows))
    assert by_sums.counts[0] == direct.counts[0] == sum(sizes)
    np.testing.assert_allclose(by_sums.means[0], everything.mean(0).numpy(), atol=1e-10)
    np.testing.assert_allclose(by_sums.means, direct.means, atol=1e-10)
    np.testing.assert_allclose(by_sums.variances[0], everything.var(0).numpy(), rtol=1e-8)
    np.testing.assert_allclose(by_sums.variances, direct.variances, rtol=1e-8)
    official = pooled(total, "official").variances
    np.testing.assert_allclose(
        official,
        pooled_direct([statistics_from_sums(s, dims) for s in per_client], "official").variances,
        rtol=1e-8,
    )


def test_classes_below_the_minimum_count_are_not_uploaded_and_forms_convert():
    h = np.arange(12.0).reshape(6, 2)
    sums = class_sums(h, np.array([0, 0, 0, 1, 2, 2]), 4, min_count=2)
    assert sums.s0.tolist() == [3, 0, 2, 0] and sums.contributors.tolist() == [1, 0, 1, 0]
    assert not sums.s1[1].any() and not sums.s2[3].any()
    stats = statistics_from_sums(sums, 2)
    np.testing.assert_allclose(stats.means[0], h[:3].mean(0))
    np.testing.assert_allclose(stats.stds[2], h[4:].std(0, ddof=1))
    back = sums_from_statistics(stats)
    np.testing.assert_allclose(back.s1, sums.s1)
    np.testing.assert_allclose(back.s2, sums.s2)
