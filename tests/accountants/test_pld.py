"""The PLD ε beside the RDP ε: the right events, tighter, and refused where it has no form."""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from fgl_workbench.accountants import (
    Gaussian,
    Laplace,
    MetricGaussian,
    PrivacyLedger,
    SubsampledGaussian,
    epsilon,
)
from fgl_workbench.accountants.events import Composed
from fgl_workbench.accountants.pld import PLDUnavailable, pld_epsilon


def exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """Balle & Wang's exact ε of a Gaussian mechanism with sensitivity / σ = ``mu``."""

    def gap(eps: float) -> float:
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta

    return brentq(gap, 0.0, 100.0)


def test_composed_gaussians_meet_the_exact_epsilon():
    """k Gaussians of σ on sensitivity s are one Gaussian with μ = s√k/σ: the mapping of
    σ, sensitivity and count must give the exact ε (PLD is pessimistic: a hair above)."""
    ledger = PrivacyLedger((Gaussian(sigma=4.0, sensitivity=2.0, count=9),))
    exact = exact_gaussian_epsilon(2.0 * 3 / 4.0, 1e-5)
    got = pld_epsilon(ledger, 1e-5)
    assert exact <= got <= exact * 1.01
    assert got < epsilon(ledger, 1e-5).epsilon  # RDP's conversion loses a little


def test_dp_sgd_is_tighter_than_rdp_and_never_far_below():
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(4):
        q, sigma = float(rng.choice([0.01, 0.05])), float(rng.uniform(0.8, 2.0))
        ledger = PrivacyLedger((SubsampledGaussian(q, sigma, 200),))
        ratios.append(pld_epsilon(ledger, 1e-5) / epsilon(ledger, 1e-5).epsilon)
    assert all(0.6 < r < 1.0 for r in ratios), ratios


def test_laplace_and_compositions_map_their_parameters():
    """Pure ε of Laplace is count·sensitivity/b; at δ > 0 PLD may only be at or below it."""
    laplace = PrivacyLedger((Laplace(b=2.0, sensitivity=1.0, count=3),))
    assert 1.2 < pld_epsilon(laplace, 1e-5) <= 1.5 + 1e-6
    both = Composed((Gaussian(4.0), Laplace(2.0)), count=2)
    parts = PrivacyLedger((Gaussian(4.0, count=2), Laplace(2.0, count=2)))
    assert pld_epsilon(PrivacyLedger((both,)), 1e-5) == pytest.approx(pld_epsilon(parts, 1e-5))


def test_events_without_a_pld_form_are_refused():
    with pytest.raises(PLDUnavailable, match="MetricGaussian"):
        pld_epsilon(PrivacyLedger((MetricGaussian(1.0, 10),)), 1e-5)
    with pytest.raises(PLDUnavailable, match="more than 10,000,000 compositions"):
        pld_epsilon(PrivacyLedger((SubsampledGaussian(1e-9, 100.0, 10**9),)), 1e-5)
    with pytest.raises(ValueError, match="no events"):
        pld_epsilon(PrivacyLedger(), 1e-5)
