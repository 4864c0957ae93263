import numpy as np
import pytest
import torch

from fgl_workbench.accountants import Gaussian, PrivacyLedger, SubsampledGaussian, epsilon
from fgl_workbench.attacks import ATTACKS
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.errors import ConfigError
from fgl_workbench.query import TableQueryAPI
from fgl_workbench.targets import TARGETS

CFG = {"encoder_rounds": 10, "rounds": 20, "local_epochs": 3}


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "metis", 3, 0, aux_fraction=0.2))


def fit(federation, defenses=(), seed=0):
    return TARGETS.get("gap").fit(federation, CFG, list(defenses), seed)


def test_non_private_gap_learns_and_is_deterministic(federation):
    a, b = fit(federation), fit(federation)
    assert a.utility["accuracy"] > 0.45  # four classes: chance is 0.25
    assert a.ledger.is_empty
    assert isinstance(a.query, TableQueryAPI)
    torch.testing.assert_close(a.query.logits(np.arange(5)), a.query.logits(np.arange(5), hops=2))
    for p, q in zip(a.global_model.parameters(), b.global_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_node_level_ledger_composes_aggregation_and_dp_sgd(federation):
    ap = applied(
        "aggregation-perturbation", {"noise_multiplier": 2.0, "level": "node", "max_degree": 8}
    )
    sgd = applied("dp-sgd", {"noise_multiplier": 1.0, "sample_rate": 0.25})
    trained = fit(federation, [ap, sgd])
    root_d = 8**0.5
    steps = (10 + 20) * 3 * 4  # rounds × local epochs × ⌈1/q⌉
    by_hand = PrivacyLedger(
        (
            Gaussian(2.0 * root_d, root_d, 2),
            Gaussian(2.0 * root_d, root_d, 2),
            SubsampledGaussian(0.25, 1.0, steps),
        )
    )
    assert epsilon(trained.ledger, 1e-5).epsilon == pytest.approx(epsilon(by_hand, 1e-5).epsilon)


def test_refusals_name_the_reason(federation):
    sgd = applied("dp-sgd", {})
    with pytest.raises(ConfigError, match="level 'node'"):
        fit(federation, [sgd])
    with pytest.raises(ConfigError, match="needs dp-sgd"):
        fit(federation, [applied("aggregation-perturbation", {"level": "node"})])
    with pytest.raises(ConfigError, match="cannot apply dp-fedavg"):
        fit(federation, [applied("dp-fedavg", {})])


def test_membership_attack_runs_on_the_released_table(federation, querier_input):
    trained = fit(federation, [applied("aggregation-perturbation", {"noise_multiplier": 1.0})])
    inp, challenge = querier_input(federation, trained)
    attack = ATTACKS.get("mia-threshold")
    out = attack.run(inp, attack.Config(hops=2), 0)
    assert out.scores.shape == challenge.is_member.shape and np.isfinite(out.scores).all()
