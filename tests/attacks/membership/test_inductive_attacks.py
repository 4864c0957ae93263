"""Membership attacks against an inductively trained federation (``partition.membership:
inductive``): they run unchanged, find an overfit target's members, and hold 0.5 where
members and non-members are exchangeable."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fgl_workbench.adversary.threat import background_knowledge, querier_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import Challenge, membership_challenge
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.attacks.metrics import auc_interval, membership_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.defenses import applied
from fgl_workbench.running.cell import inductive_release
from fgl_workbench.targets import TARGETS


@pytest.fixture(scope="module")
def overfit(overfit_inductive):
    return overfit_inductive


def run(fed, trained, challenge, name, params, pool=None):
    attack = ATTACKS.get(name)
    know = background_knowledge(fed, trained)
    inp = AttackInput(querier_view(trained, fed), know, challenge.candidates, pool)
    return attack.run(inp, attack.Config(**params), 0)


def test_the_runner_scores_the_released_model_and_stamps_the_recipe(overfit):
    _, trained = overfit
    assert trained.recipe.inductive
    assert 0.25 < trained.utility["accuracy"] <= 1.0  # four classes: chance is 0.25


@pytest.mark.parametrize("hops", [0, 2])
def test_threshold_finds_an_overfit_inductive_targets_members(overfit, hops):
    fed, trained = overfit
    challenge = membership_challenge(fed, seed=0)
    out = run(fed, trained, challenge, "mia-threshold", {"signal": "loss", "hops": hops})
    metrics, _ = membership_metrics(out.scores, challenge.is_member, out.threshold)
    assert metrics["auc_ci_low"] > 0.55, metrics


def exchangeable(fed, seed: int) -> Challenge:
    """'Members' are the clients' validation nodes, non-members their test nodes: neither
    took part in the loss; validation nodes sat in the training graph, in a component of
    their own, which under a release of the last round moves no weight."""
    val = np.concatenate([p.val for p in fed.partition.clients])
    test = np.concatenate([p.test for p in fed.partition.clients])
    rng = np.random.default_rng(seed)
    test = rng.choice(test, val.size, replace=False)
    ids = np.concatenate([val, test])
    truth = np.concatenate([np.ones(val.size, bool), np.zeros(test.size, bool)])
    real = membership_challenge(fed, seed=0)
    cands = dataclasses.replace(real.candidates, ids=ids, labels=fed.dataset.labels[ids])
    return Challenge(cands, truth, np.zeros(ids.size, int))


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("mia-threshold", {"signal": "loss", "hops": 0}),
        ("mia-threshold", {"signal": "loss", "hops": 2}),
        ("mia-shadow", {"setting": "full", "hops": 2}),
    ],
)
def test_no_signal_between_validation_and_test_nodes(overfit, name, params):
    fed, trained = overfit
    challenge = exchangeable(fed, seed=1)
    out = run(fed, trained, challenge, name, params, ReferencePool(seed=3))
    low, high = auc_interval(out.scores, challenge.is_member, confidence=1 - 0.05 / 3)
    assert low < 0.5 < high, (low, high)


def test_the_shadow_attack_runs_unchanged_and_trains_its_shadow_inductively(overfit):
    fed, trained = overfit
    challenge = membership_challenge(fed, seed=0)
    pool = ReferencePool(seed=3)
    out = run(fed, trained, challenge, "mia-shadow", {"setting": "tstf", "hops": 2}, pool)
    metrics, _ = membership_metrics(out.scores, challenge.is_member, out.threshold)
    assert pool.trained == 1
    assert metrics["auc_ci_low"] > 0.5, metrics


def test_an_embedding_release_leaves_the_inductive_test_utility_unscored():
    """FedAvg with metric DP releases embeddings only: the runner cannot score its test nodes
    through it, and says so with NaN instead of stopping the cell."""
    ds = csbm(CSBMParams(num_nodes=300, num_classes=3, num_features=32, seed=2))
    part = make_partition(ds, "metis", 3, seed=0, aux_fraction=0.2, membership="inductive")
    fed = build_federation(ds, part)
    defenses = [applied("metric-dp", {"sigma0": 0.5, "k": 5})]
    trained = TARGETS.get("fedavg").fit(fed, {"rounds": 2}, defenses, seed=0)
    inductive_release(trained, fed)
    assert trained.recipe.inductive
    assert np.isnan(trained.utility["accuracy"])
