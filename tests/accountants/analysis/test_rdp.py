import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants.analysis import rdp as opacus_rdp
from scipy.integrate import quad

from fgl_workbench.accountants.analysis import rdp
from fgl_workbench.accountants.analysis.orders import EXTENDED_ORDERS, OPACUS_ORDERS


@pytest.fixture(scope="module")
def random_grid():
    rng = np.random.default_rng(2024)
    n = 120
    return (
        10 ** rng.uniform(-6, 0, n),  # q from 1e-6 to 1
        10 ** rng.uniform(-0.5, 1.5, n),  # σ from 0.3 to 30
        rng.integers(1, 100_000, n),
        10 ** rng.uniform(-9, -2, n),  # δ
    )


def test_rdp_matches_opacus_on_its_orders(random_grid):
    q, sigma, steps, _ = random_grid
    ours = rdp.subsampled_gaussian(q, sigma, OPACUS_ORDERS) * steps[:, None]
    ref = np.array(
        [
            opacus_rdp.compute_rdp(q=a, noise_multiplier=b, steps=int(c), orders=OPACUS_ORDERS)
            for a, b, c in zip(q, sigma, steps, strict=True)
        ]
    )
    # Relative 1e-9; below ~1e-12 per step both sides are rounding noise of log(1 + tiny).
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-11 * steps.max())


def test_epsilon_matches_opacus(random_grid):
    from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian, epsilon

    q, sigma, steps, delta = random_grid
    for a, b, c, d in zip(q, sigma, steps, delta, strict=True):
        r = opacus_rdp.compute_rdp(q=a, noise_multiplier=b, steps=int(c), orders=OPACUS_ORDERS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref, ref_order = opacus_rdp.get_privacy_spent(orders=OPACUS_ORDERS, rdp=r, delta=d)
            ours = epsilon(
                PrivacyLedger((SubsampledGaussian(a, b, int(c)),)), d, orders="opacus", refine=False
            )
        if ref < 0:  # Opacus reports negative ε for near-zero loss; we clamp at 0
            assert ours.epsilon == 0
            continue
        # ε is a difference of O(1) terms, so both sides carry ~1e-12 absolute rounding; where
        # Opacus's fractional series carries rounding beyond 1e-9 of log A, ours adds its
        # allowance (``rdp._ROUNDING``, a bound), up to ~2e-9 of ε here, never less
        assert ref * (1 - 1e-9) - 1e-11 <= ours.epsilon <= ref * (1 + 1e-8) + 1e-11
        assert ours.order == ref_order


def test_opacus_published_value():
    """Opacus's own test: σ = 1.5, q = 0.04, 90 epochs of 1/q steps, δ = 1e-5 → ε ≈ 7.3291."""
    from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian, epsilon

    ledger = PrivacyLedger((SubsampledGaussian(0.04, 1.5, int(90 / 0.04)),))
    report = epsilon(ledger, 1e-5, orders="opacus", refine=False)
    assert report.epsilon == pytest.approx(7.3291, abs=5e-5)
    assert report.order == 3.9


def test_special_cases():
    out = rdp.subsampled_gaussian(
        np.array([0.0, 1.0, 0.5]), np.array([1.0, 2.0, 0.0]), np.array([2.0, 3.5])
    )
    assert out[0].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(out[1], np.array([2.0, 3.5]) / 8)  # q = 1 is the Gaussian
    assert np.isinf(out[2]).all()


@settings(max_examples=30, deadline=None)
@given(q=st.floats(1e-8, 0.999), sigma=st.floats(0.3, 50.0))
def test_finite_and_nonnegative_for_extreme_but_valid_inputs(q, sigma):
    out = rdp.subsampled_gaussian(q, sigma, EXTENDED_ORDERS)
    assert np.isfinite(out).all() and (out >= -1e-12).all()


@pytest.mark.parametrize("alpha", [1.5, 2.0, 7.3])
def test_gaussian_and_laplace_against_numerical_renyi_divergence(alpha):
    def renyi(log_p, log_q):
        def integrand(x):
            return np.exp(alpha * log_p(x) + (1 - alpha) * log_q(x))

        integral, _ = quad(integrand, -80, 80, points=[0, 1], limit=400)
        return np.log(integral) / (alpha - 1)

    s, b = 1.7, 1.3

    def log_gauss(m):
        return lambda x: -((x - m) ** 2) / (2 * s * s) - np.log(np.sqrt(2 * np.pi) * s)

    def log_lap(m):
        return lambda x: -abs(x - m) / b - np.log(2 * b)

    want_gauss = renyi(log_gauss(0), log_gauss(1))
    want_lap = renyi(log_lap(0), log_lap(1))
    assert rdp.gaussian(s, np.array([alpha]))[0] == pytest.approx(want_gauss, rel=1e-6)
    assert rdp.laplace(b, np.array([alpha]))[0] == pytest.approx(want_lap, rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(q=st.floats(1e-4, 0.5), s1=st.floats(0.5, 10), ds=st.floats(0.01, 5))
def test_rdp_decreases_in_sigma_and_increases_in_q(q, s1, ds):
    a = rdp.subsampled_gaussian(q, s1, OPACUS_ORDERS)
    b = rdp.subsampled_gaussian(q, s1 + ds, OPACUS_ORDERS)
    assert (b <= a * (1 + 1e-9) + 1e-12).all()
    c = rdp.subsampled_gaussian(min(1.0, q * 1.5), s1, OPACUS_ORDERS)
    assert (c >= a * (1 - 1e-9) - 1e-12).all()


def test_fractional_orders_lie_between_their_integer_neighbours():
    """The fractional series once stopped at its first term, before its mass: RDP came out
    negative (q = 0.2, σ = 10, α = 160.5: −0.22) and ε was printed as 0."""
    rng = np.random.default_rng(7)
    q, sigma = 10 ** rng.uniform(-3, np.log10(0.95), 60), 10 ** rng.uniform(-0.3, 1.5, 60)
    frac = np.array([1.5, 3.3, 20.5, 60.5, 100.5, 160.5, 300.5, 700.5, 1500.5])
    ints = np.unique(np.concatenate([np.floor(frac), np.ceil(frac)]))
    ints = ints[ints >= 2]
    at_frac = rdp.subsampled_gaussian(q, sigma, frac)
    at_int = dict(zip(ints.tolist(), rdp.subsampled_gaussian(q, sigma, ints).T, strict=True))
    for j, a in enumerate(frac):
        below = at_int[np.floor(a)] if a > 2 else np.zeros_like(q)
        above = at_int[np.ceil(a)]
        assert (at_frac[:, j] >= below * (1 - 1e-9)).all(), a
        assert (at_frac[:, j] <= above * (1 + 1e-9)).all(), a
    assert rdp.subsampled_gaussian(0.2, 10.0, np.array([160.5]))[0, 0] > 0.0444


def test_log_a_is_never_negative_where_it_rounds_to_zero():
    """q = 1e-12: log A_α ~ 1e-28, which the direct sum rounded to ±1e-17; times 1e9 steps
    that made the curve negative (refused by the accountant). The log1p form cannot."""
    orders = np.array([1.5, 2.0, 3.0, 8.0, 64.0, 1024.0])
    per_step = rdp.subsampled_gaussian(1e-12, 100.0, orders)[0]
    assert (per_step >= 0).all()


@pytest.mark.parametrize("q, sigma", [(1e-6, 50.0), (1e-4, 100.0)])
def test_fractional_orders_at_tiny_q_never_fall_below_the_true_rdp(q, sigma):
    """log A_α ~ 1e-16 here, below what the series' sum of O(1) terms resolves: its value was
    rounding noise, 4 % under the true RDP at α = 3.3 (q = 1e-6, σ = 50), and over 1e6 steps
    the curve stepped down. Each order is now at least the RDP computed to 40 digits."""
    import mpmath as mp

    orders = np.array([1.05, 1.5, 1.9, 2.5, 3.3, 7.5, 20.5])
    ours = rdp.subsampled_gaussian(q, sigma, orders)[0]
    with mp.workdps(40):
        qm, s = mp.mpf(q), mp.mpf(sigma)

        def exact(a: float) -> float:
            def mix(x):
                return mp.npdf(x, 0, s) * (1 - qm + qm * mp.exp((2 * x - 1) / (2 * s * s))) ** a

            return float(mp.log(mp.quad(mix, [-mp.inf, -10 * s, 0, 10 * s, mp.inf])) / (a - 1))

        truth = np.array([exact(a) for a in orders])
    assert (ours >= truth * (1 - 1e-9)).all(), ours / truth
    assert (ours <= 2 * truth).all()  # a bound, not a vacuous one
