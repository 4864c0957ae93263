import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fgl_workbench.accountants import (
    Caveat,
    Composed,
    Gaussian,
    Laplace,
    MetricGaussian,
    NoGuarantee,
    PrivacyLedger,
    Scope,
    SubsampledGaussian,
    calibrate,
    calibrate_sigma,
    delta,
    epsilon,
    epsilons_by_adversary,
    largest_finite_epsilon,
    max_steps,
    subsampled_gaussian_grid,
)
from fgl_workbench.accountants import accountant as accountant_module
from fgl_workbench.accountants.accountant import InfiniteEpsilonWarning, OrderGridWarning


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


def scoped(sigma, steps=100):
    """Central DP-FedAvg's shape: amplified for clients and querier, ∞ for the server, and an
    edge-level Gaussian for everyone."""
    return PrivacyLedger(
        (
            SubsampledGaussian(
                0.1, sigma, steps, scope=Scope("client", "c", ("clients", "querier"))
            ),
            NoGuarantee("adds the noise", Scope("client", "s", ("server",))),
            Gaussian(4 * sigma, 1.0, 1, scope=Scope("edge", "e", ("server", "clients", "querier"))),
        )
    )


def test_calibration_by_adversary_bounds_the_largest_finite_row():
    """The server's row is ∞ at any σ and left out; the largest finite row (other clients and
    the querier at client level and, composed with the edge event, at edge level) meets the
    target tightly."""
    sigma = calibrate(scoped, 2.0, 1e-5, per_adversary=True)
    rows = epsilons_by_adversary(scoped(sigma), 1e-5)
    assert math.isinf(max(r.epsilon for r in rows))  # the server stays ∞
    finite = [r.epsilon for r in rows if math.isfinite(r.epsilon)]
    assert max(finite) == largest_finite_epsilon(scoped(sigma), 1e-5) <= 2.0
    assert largest_finite_epsilon(scoped(sigma * (1 - 1e-4)), 1e-5) > 2.0
    # one amplified event for every row: the same σ as the DP-SGD calculator's
    record = Scope("record", "r", ("querier",))

    def dp_sgd(s):
        return PrivacyLedger((SubsampledGaussian(0.1, s, 100, scope=record),))

    one = calibrate(dp_sgd, 2.0, 1e-5, per_adversary=True)
    assert one == calibrate_sigma(2.0, 1e-5, 0.1, 100)


def test_each_finite_row_gets_its_pld_epsilon_beside_the_rdp_one():
    """PLD on the same events as each row: at most the RDP figure and not far below it (the
    PLD accountant is tighter, never another mechanism); ∞ rows have none; rows composing the
    same events share one figure; a caveat adds nothing to either."""
    querier = Scope("client", "c", ("querier",))
    ledger = scoped(2.0).record(Caveat("released round chosen on validation", querier))
    rows = {(r.adversary, r.unit): r for r in epsilons_by_adversary(ledger, 1e-5, pld=True)}
    assert rows[("server", "client")].epsilon_pld is None  # ∞
    for key in [("clients", "client"), ("querier", "client"), ("clients", "edge")]:
        r = rows[key]
        assert math.isfinite(r.epsilon) and 0.6 * r.epsilon < r.epsilon_pld <= r.epsilon
    assert rows[("clients", "client")].epsilon_pld == rows[("querier", "client")].epsilon_pld
    # without pld=True (calibration's search) nothing is computed
    assert all(r.epsilon_pld is None for r in epsilons_by_adversary(ledger, 1e-5))
    # beyond what the PLD accountant composes in reasonable time: the RDP ε alone
    many = PrivacyLedger((SubsampledGaussian(1e-3, 5.0, 2 * 10**7, scope=querier),))
    (row,) = [r for r in epsilons_by_adversary(many, 1e-5, pld=True) if r.adversary == "querier"]
    assert math.isfinite(row.epsilon) and row.epsilon_pld is None


def test_weak_noise_gets_no_pld_figure_and_costs_no_time():
    """Weak noise makes dp_accounting's discretisation slow and huge (σ/Δ = 1e-3 asked for
    76 GiB): such rows keep their RDP ε alone, at once, and a PLD figure is never shown
    above the RDP one or as ∞."""
    import time

    querier = Scope("record", "r", ("querier",))
    start = time.perf_counter()
    for event in [
        Gaussian(1e-3, 1.0, 1, scope=querier),  # ε far past 50
        SubsampledGaussian(1e-3, 0.15, 1, scope=querier),  # ε 34 < 50, yet σ below the floor
        Laplace(1e-3, 1.0, 1, scope=querier),
    ]:
        (row,) = [
            r
            for r in epsilons_by_adversary(PrivacyLedger((event,)), 1e-5, pld=True)
            if r.adversary == "querier"
        ]
        assert row.epsilon_pld is None, event
    assert time.perf_counter() - start < 10


def test_calibration_by_adversary_refuses_what_no_noise_reaches():
    blind = NoGuarantee("sees everything", Scope("client", "s", ("server",)))
    with pytest.raises(ValueError, match="nothing to calibrate"):
        calibrate(lambda s: PrivacyLedger((blind,)), 2.0, 1e-5, per_adversary=True)
    with pytest.raises(ValueError, match="every row is"):
        largest_finite_epsilon(PrivacyLedger((blind,)), 1e-5)
    fixed = Gaussian(0.1, 1.0, 1, scope=Scope("edge", "e", ("querier",)))  # no σ moves it

    def with_fixed(s):
        return PrivacyLedger((fixed, Gaussian(s, 1.0, 1, scope=Scope("edge", "e", ("querier",)))))

    with pytest.raises(ValueError, match="out of reach"):
        calibrate(with_fixed, 2.0, 1e-5, per_adversary=True)


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


@pytest.mark.parametrize("orders", ["opacus", "extended"])
@pytest.mark.parametrize("kind", ["improved", "classic"])
def test_the_grid_skips_only_orders_that_cannot_win(orders, kind, monkeypatch):
    """Fractional orders whose ε, bounded below by the floor integer order's log A, cannot beat
    an integer order are not summed: ε and the best order are bit for bit those of every
    order summed, on scattered and swept configurations (one pair, many step counts), q = 1,
    σ = 0 and no steps included; and most orders are skipped, or the pruning did nothing."""
    rng = np.random.default_rng(7)
    q = np.concatenate([10 ** rng.uniform(-5, -0.3, 400), [0.1] * 50, [1.0, 0.3, 0.2]])
    s = np.concatenate([rng.uniform(0.3, 20, 400), [0.7] * 50, [2.0, 0.0, 1.0]])
    steps = np.concatenate([rng.integers(1, 100_000, 400), np.geomspace(1, 1e6, 50), [5, 5, 0]])
    pruned = subsampled_gaussian_grid(q, s, steps, 1e-5, orders=orders, conversion_kind=kind)
    asked = []
    summed = accountant_module.analysis.subsampled_gaussian

    def every_order(q, z, grid, needed=None):
        if needed is not None:
            asked.append(needed.mean())
        return summed(q, z, grid)

    monkeypatch.setattr(accountant_module.analysis, "subsampled_gaussian", every_order)
    full = subsampled_gaussian_grid(q, s, steps, 1e-5, orders=orders, conversion_kind=kind)
    np.testing.assert_array_equal(pruned[0], full[0])
    np.testing.assert_array_equal(pruned[1], full[1])
    (share,) = asked
    assert share < 0.5


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


def _pld_epsilon(q, sigma, steps, d, pessimistic):
    """dp_accounting's privacy-loss-distribution accountant: with pessimistic=False it
    under-estimates the true ε, so every valid upper bound lies above it."""
    from dp_accounting.pld import privacy_loss_distribution as pl

    pld = pl.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=1e-4,
        pessimistic_estimate=pessimistic,
    )
    return pld.self_compose(int(steps)).get_epsilon_for_delta(d)


@pytest.mark.parametrize(
    ("q", "sigma", "steps", "pld", "opacus"),
    [(0.2, 10.0, 1, 0.067, None), (0.447, 9.59, 1, 0.163, 0.185)],
)
def test_issue_examples_are_no_longer_zero(q, sigma, steps, pld, opacus):
    """Printed 0 before (negative fractional-order RDP clamped to 0)."""
    ours = eps(sgm(q, sigma, steps))
    assert ours >= pld
    assert ours >= _pld_epsilon(q, sigma, steps, 1e-5, pessimistic=False)
    if opacus is not None:
        assert ours <= opacus + 1e-3


def test_whole_refinement_region_stays_above_an_independent_lower_side():
    """Configurations whose best order is high (large σ, few steps), where the refinement
    evaluates fractional orders above 60: ε never falls below dp_accounting's optimistic PLD,
    and never above dp_accounting's own RDP accountant (a coarser order grid)."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    rng = np.random.default_rng(11)
    checked = 0
    for q, s, n in zip(
        rng.uniform(0.02, 0.6, 14), rng.uniform(3, 20, 14), rng.integers(1, 4, 14), strict=True
    ):
        report = epsilon(sgm(q, s, int(n)), 1e-5)
        checked += report.order > 60
        lower = _pld_epsilon(q, s, int(n), 1e-5, pessimistic=False)
        acc = rdp_privacy_accountant.RdpAccountant()
        acc.compose(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), int(n)
        )
        assert lower <= report.epsilon <= acc.get_epsilon(1e-5) * (1 + 1e-6), (q, s, n)
    assert checked >= 5  # the region the bug lived in is covered


def test_calibration_in_the_high_order_region_meets_the_budget():
    sigma = calibrate_sigma(0.07, 1e-5, 0.2, 1)
    assert _pld_epsilon(0.2, sigma, 1, 1e-5, pessimistic=True) <= 0.07


class _Broken:
    """A plug-in event with an impossible RDP curve (negative, then decreasing)."""

    metric = False

    def rdp(self, orders, rho=None):
        return 1.0 - np.asarray(orders, dtype=float) / 10


def test_an_impossible_rdp_curve_is_refused_not_clamped():
    with pytest.raises(ArithmeticError, match="negative or not a number at order"):
        epsilon(PrivacyLedger((_Broken(),)), 1e-5)


def test_the_privacy_profile_is_the_refined_delta_or_a_little_looser():
    """privacy_profile reads δ(ε) at many ε from one RDP curve: never below ``delta`` (which
    refines each), and within a few per cent of it."""
    from fgl_workbench.accountants.accountant import privacy_profile

    ledger = PrivacyLedger((SubsampledGaussian(0.2, 3.0, 10),))
    grid = np.linspace(0.0, 4.0, 9)
    profile = privacy_profile(ledger, grid)
    refined = np.array([delta(ledger, float(e)).delta for e in grid])
    assert (profile >= refined * (1 - 1e-12)).all()
    assert (profile <= refined * 1.1).all()
