"""The re-identification audit of metric-DP releases: its statistic is the Gaussian
log-likelihood ratio, it reads the releases the target really made, the held-out bound it
yields stays under the accountant's ε(ρ) for a correct mechanism and exceeds it when the
releases carry less noise than the ledger says."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from fgl_workbench.accountants import MetricGaussian, PrivacyLedger, epsilon
from fgl_workbench.adversary.threat import ReleaseView
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.audit import likelihood_ratio
from fgl_workbench.attacks.challenges import reidentification_challenge
from fgl_workbench.attacks.metrics import held_out_epsilon
from fgl_workbench.defenses.metric_dp import MetricReleases
from fgl_workbench.errors import NotApplicableError


def test_the_statistic_is_the_log_likelihood_ratio_over_the_releases_a_node_had():
    rng = np.random.default_rng(0)
    e1, e2 = rng.normal(size=(1, 4, 3)), rng.normal(size=(1, 4, 3))
    y = rng.normal(size=(1, 4, 3))
    y[0, 3] = np.nan  # a release this node did not have
    expected = sum(
        multivariate_normal(e2[0, r], 0.5**2).logpdf(y[0, r])
        - multivariate_normal(e1[0, r], 0.5**2).logpdf(y[0, r])
        for r in range(3)
    )
    assert likelihood_ratio(y, 0.5, e1, e2)[0] == pytest.approx(expected)


def _sphere(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _released(n: int, releases: int, sigma: float, seed: int) -> MetricReleases:
    """n nodes, each released ``releases`` times (a slowly drifting clean vector) with noise
    ``sigma``: what a target's evaluator record holds."""
    rng = np.random.default_rng(seed)
    base = _sphere(n, 8, seed)
    log = []
    for _ in range(releases):
        clean = base + 0.01 * rng.normal(size=base.shape)
        clean /= np.linalg.norm(clean, axis=1, keepdims=True)
        log.append((np.arange(n) + 100, clean, clean + sigma * rng.normal(size=clean.shape)))
    return MetricReleases.of(log)


def test_pairs_are_disjoint_within_rho_at_every_release_and_show_the_real_releases():
    released = _released(500, 3, 0.1, 1)
    task = reidentification_challenge(released, 0.6, 300, seed=0)
    u, v = task.pairs.src, task.pairs.dst
    assert np.unique(np.concatenate([u, v])).size == 2 * u.size  # independent trials
    assert (task.distance <= 0.6).all()
    worst = np.linalg.norm(task.first - task.second, axis=2).max(1)
    np.testing.assert_allclose(worst, task.distance)
    rows = np.searchsorted(released.nodes, np.where(task.chosen, v, u))
    np.testing.assert_array_equal(task.releases, released.noisy[rows])  # not regenerated
    assert 0.35 < task.chosen.mean() < 0.65
    with pytest.raises(NotApplicableError, match="within ρ"):
        reidentification_challenge(released, 1e-6, 100, seed=0)


def test_nodes_released_a_different_number_of_times_are_never_paired():
    one = _released(50, 1, 0.1, 2)
    log = [(one.nodes, one.clean[:, 0], one.noisy[:, 0])]
    log.append((one.nodes[:25], one.clean[:25, 0], one.noisy[:25, 0]))  # half released twice
    released = MetricReleases.of(log)
    d = released.distances(np.arange(50))
    assert np.isinf(d[:25, 25:]).all() and np.isfinite(d[:25, :25]).all()


def _audit(sigma_released: float, sigma_claimed: float, releases: int = 2) -> tuple[float, float]:
    rho, delta = 0.5, 1e-5
    released = _released(4000, releases, sigma_released, 3)
    task = reidentification_challenge(released, rho, 2000, seed=1)
    view = ReleaseView("node", task.releases, task.first, task.second, sigma_claimed)
    attack = ATTACKS.get("reidentification-audit")
    out = attack.run(AttackInput(view, None, task.pairs), attack.Config(), 0)
    found = held_out_epsilon(out.scores, task.chosen, delta, seed=0)
    ledger = PrivacyLedger((MetricGaussian(sigma_claimed, releases),))
    return found, epsilon(ledger, delta, rho=rho).epsilon


def test_the_bound_holds_on_the_mechanism_the_ledger_states():
    found, bound = _audit(1.2, 1.2)
    assert found <= bound


def test_releases_with_10x_less_noise_than_the_ledger_says_fail_the_audit():
    found, bound = _audit(0.12, 1.2)
    assert found > bound
