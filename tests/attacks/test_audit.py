"""The re-identification audit of metric-DP releases: its statistic is the Gaussian
log-likelihood ratio, it separates near-noiseless releases, and the held-out bound it yields
stays under the accountant's ε(ρ) for the mechanism it audits."""

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from torch_geometric.data import Data

from accountants import MetricGaussian, PrivacyLedger, epsilon
from attacks import ATTACKS, AttackInput
from attacks.audit import likelihood_ratio
from attacks.metrics import held_out_epsilon
from workbench.challenges import reidentification_challenge
from workbench.errors import NotApplicableError
from workbench.threat import ReleaseView


def test_the_statistic_is_the_log_likelihood_ratio():
    rng = np.random.default_rng(0)
    e1, e2 = rng.normal(size=(1, 3)), rng.normal(size=(1, 3))
    y = rng.normal(size=(1, 4, 3))
    sigmas = np.array([0.5, 0.5, 1.0, 2.0])
    expected = sum(
        multivariate_normal(e2[0], s**2).logpdf(y[0, j])
        - multivariate_normal(e1[0], s**2).logpdf(y[0, j])
        for j, s in enumerate(sigmas)
    )
    assert likelihood_ratio(y, sigmas, e1, e2)[0] == pytest.approx(expected)


def _sphere(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_pairs_lie_within_rho_and_the_releases_follow_the_mechanism():
    clean = _sphere(500, 4, 1)
    task = reidentification_challenge(clean, 0.4, [(0.1, 3), (0.2, 2)], 300, seed=0)
    u, v = task.pairs.src, task.pairs.dst
    assert (u != v).all() and (task.distance <= 0.4 + 1e-12).all()
    np.testing.assert_allclose(np.linalg.norm(clean[u] - clean[v], axis=1), task.distance)
    assert task.releases.shape == (u.size, 5, 4)
    source = clean[np.where(task.chosen, v, u)]
    residual = task.releases - source[:, None, :]
    assert residual[:, :3].std() == pytest.approx(0.1, rel=0.1)
    assert residual[:, 3:].std() == pytest.approx(0.2, rel=0.1)
    assert 0.4 < task.chosen.mean() < 0.6
    with pytest.raises(NotApplicableError, match="within ρ"):
        reidentification_challenge(clean, 1e-6, [(0.1, 1)], 100, seed=0)


class Fixed(torch.nn.Module):
    """A 'model' whose embedding is a fixed table: the audit's clean embeddings."""

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = torch.from_numpy(table)

    def embed(self, x, edge_index):
        return self.table


@pytest.mark.parametrize("sigma0", [0.05, 0.3])
def test_the_audit_bound_holds_and_is_tight_enough_to_mean_something(sigma0):
    clean = _sphere(3000, 8, 2)
    rho, releases, delta = 0.3, 4, 1e-5
    task = reidentification_challenge(clean, rho, [(sigma0, releases)], 2000, seed=1)
    view = ReleaseView("node", 2, Fixed(clean), task.releases, np.full(releases, sigma0))
    graph = Data(x=torch.zeros(3000, 1), edge_index=torch.zeros(2, 0, dtype=torch.long))
    knowledge = type("K", (), {"graph": graph})()
    out = ATTACKS.get("reidentification-audit").run(
        AttackInput(view, knowledge, task.pairs), ATTACKS.get("reidentification-audit").Config(), 0
    )
    found = held_out_epsilon(out.scores, task.chosen, delta, seed=0)
    bound = epsilon(PrivacyLedger((MetricGaussian(sigma0, releases),)), delta, rho=rho).epsilon
    assert found <= bound
    if sigma0 < 0.1:
        assert found > 2.0  # barely any noise: pairs are told apart
