import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accountants import (
    Composed,
    Gaussian,
    Laplace,
    MetricGaussian,
    PrivacyLedger,
    SubsampledGaussian,
    calibrate_sigma,
    delta,
    epsilon,
    max_steps,
    subsampled_gaussian_grid,
)
from accountants.accountant import InfiniteEpsilonWarning, OrderGridWarning


def sgm(q, sigma, steps):
    return PrivacyLedger((SubsampledGaussian(q, sigma, steps),))


def eps(ledger, d=1e-5, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OrderGridWarning)
        return epsilon(ledger, d, **kw).epsilon


def test_extended_orders_never_worse_and_much_better_when_private():
    rng = np.random.default_rng(0)
    for q, s, n in zip(
        10 ** rng.uniform(-4, -1, 15),
        rng.uniform(0.6, 10, 15),
        rng.integers(1, 5000, 15),
        strict=True,
    ):
        assert eps(sgm(q, s, int(n))) <= eps(sgm(q, s, int(n)), orders="opacus", refine=False)
    small_ext = eps(sgm(0.001, 8.0, 100))
    small_opacus = eps(sgm(0.001, 8.0, 100), orders="opacus", refine=False)
    assert small_ext < small_opacus / 10  # 0.0049 vs 0.103: Opacus's grid stops at α = 63


def test_edge_of_grid_warns():
    with pytest.warns(OrderGridWarning, match="largest"):
        report = epsilon(sgm(0.001, 8.0, 100), 1e-5, orders="opacus", refine=False)
    assert report.order == 63.0


@settings(max_examples=25, deadline=None)
@given(
    q=st.floats(1e-4, 0.5),
    s=st.floats(0.5, 8),
    n=st.integers(1, 1000),
    b=st.floats(0.5, 10),
    count=st.integers(1, 20),
    repeat=st.integers(1, 5),
)
def test_composition_is_additive_and_order_free(q, s, n, b, count, repeat):
    a, lap = SubsampledGaussian(q, s, n), Laplace(b, count=count)
    orders = np.array([1.5, 2.0, 8.0, 32.0, 256.0])
    both = PrivacyLedger((a, lap)).rdp(orders)
    np.testing.assert_allclose(both, a.rdp(orders) + lap.rdp(orders), rtol=1e-12)
    np.testing.assert_allclose(PrivacyLedger((lap, a)).rdp(orders), both, rtol=1e-12)
    np.testing.assert_allclose(
        Composed((a, lap), count=repeat).rdp(orders), repeat * both, rtol=1e-12
    )


@settings(max_examples=25, deadline=None)
@given(sigma=st.floats(0.1, 50), r=st.integers(1, 10_000), d=st.floats(1e-9, 1e-2))
def test_r_releases_at_sigma_equal_one_release_at_sigma_over_sqrt_r(sigma, r, d):
    many = PrivacyLedger((Gaussian(sigma, count=r),))
    one = PrivacyLedger((Gaussian(sigma / math.sqrt(r)),))
    assert eps(many, d) == pytest.approx(eps(one, d), rel=1e-9, abs=1e-12)


def test_metric_releases_follow_the_same_rule():
    metric = PrivacyLedger((MetricGaussian(1.0, 200),))
    single = PrivacyLedger((MetricGaussian(1.0 / math.sqrt(200), 1),))
    assert eps(metric, 1e-4, rho=0.1466) == pytest.approx(eps(single, 1e-4, rho=0.1466))


@settings(max_examples=25, deadline=None)
@given(
    q=st.floats(1e-4, 0.2),
    s=st.floats(0.5, 8),
    n=st.integers(1, 3000),
    ds=st.floats(0.05, 3),
    dn=st.integers(1, 3000),
)
def test_epsilon_monotone(q, s, n, ds, dn):
    base = eps(sgm(q, s, n), orders="opacus", refine=False)
    assert eps(sgm(q, s + ds, n), orders="opacus", refine=False) <= base + 1e-9
    assert eps(sgm(q, s, n + dn), orders="opacus", refine=False) >= base - 1e-9
    assert eps(sgm(min(1.0, q * 2), s, n), orders="opacus", refine=False) >= base - 1e-9


def test_delta_is_the_inverse_of_epsilon():
    ledger = sgm(0.02, 1.2, 800)
    for d in (1e-3, 1e-5, 1e-8):
        e = epsilon(ledger, d)
        assert delta(ledger, e.epsilon).delta == pytest.approx(d, rel=1e-6)


def test_calibration_meets_the_budget_tightly():
    sigma = calibrate_sigma(2.0, 1e-5, 0.01, 1000)
    assert eps(sgm(0.01, sigma, 1000)) <= 2.0
    assert eps(sgm(0.01, sigma * (1 - 1e-4), 1000)) > 2.0
    n = max_steps(2.0, 1e-5, 0.01, 1.0)
    assert eps(sgm(0.01, 1.0, n)) <= 2.0 < eps(sgm(0.01, 1.0, n + 1))
    assert max_steps(1e-3, 1e-5, 0.5, 0.5) == 0
    with pytest.raises(ValueError, match="out of reach"):
        calibrate_sigma(1e-9, 1e-5, 1.0, 10**9, upper=10.0)


def test_grid_matches_single_calls_and_dedupes_pairs():
    q = np.array([0.01, 0.01, 0.05, 0.05])
    s = np.array([1.0, 1.0, 2.0, 2.0])
    n = np.array([100, 1000, 100, 0])
    e, orders = subsampled_gaussian_grid(q, s, n, 1e-5, orders="opacus")
    for i in range(3):
        assert e[i] == pytest.approx(
            eps(sgm(q[i], s[i], int(n[i])), orders="opacus", refine=False), rel=1e-12
        )
    assert e[3] == 0.0  # no steps, no loss


def test_never_nan_never_negative_and_inf_is_warned():
    assert eps(sgm(1e-9, 100.0, 1), 0.5) == 0.0
    with pytest.warns(InfiniteEpsilonWarning):
        report = epsilon(PrivacyLedger((Gaussian(1e-200),)), 1e-5)
    assert report.epsilon == math.inf
    huge = eps(sgm(0.01, 1.0, 10**12))
    assert math.isfinite(huge) and huge > 0


def test_bad_inputs_name_the_field():
    for make, field in [
        (lambda: SubsampledGaussian(1.5, 1.0, 10), "q"),
        (lambda: SubsampledGaussian(0.1, 0.0, 10), "sigma"),
        (lambda: SubsampledGaussian(0.1, 1.0, -1), "steps"),
        (lambda: Laplace(-1.0), "b"),
        (lambda: MetricGaussian(1.0, 2.5), "releases"),
        (lambda: Gaussian(float("nan")), "sigma"),
    ]:
        with pytest.raises(ValueError, match=field):
            make()
    with pytest.raises(ValueError, match="delta"):
        epsilon(sgm(0.1, 1.0, 1), 1.5)
    with pytest.raises(ValueError, match="no events"):
        epsilon(PrivacyLedger(), 1e-5)
    with pytest.raises(ValueError, match="rho"):
        epsilon(PrivacyLedger((MetricGaussian(1.0, 3),)), 1e-5)
    mixed = PrivacyLedger((MetricGaussian(1.0, 3), Gaussian(1.0)))
    with pytest.raises(ValueError, match="apart"):
        epsilon(mixed, 1e-5, rho=0.1)
    assert eps(mixed.standard()) > 0 and eps(mixed.metric(), rho=0.1) > 0
