"""Properties every membership attack must have, checked on each of them."""

import dataclasses

import numpy as np
import pytest

from fgl_workbench.adversary.threat import background_knowledge, querier_view, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import Challenge, membership_challenge
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.attacks.metrics import auc_interval, membership_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import ClientPart, make_partition
from fgl_workbench.data.synthetic import SyntheticGraphsParams, synthetic_graphs
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS

REFS = 8
CASES = [
    ("mia-threshold", {"signal": "loss"}),
    ("mia-threshold", {"signal": "modified_entropy", "hops": 2}),
    ("mia-shadow", {"setting": "full"}),
    ("mia-shadow", {"setting": "full", "label_aware": False}),
    ("mia-shadow", {"setting": "disjoint", "hops": 2}),
    # 0 hops: at 2 hops a shadow queried in the full graph ranks this toy target's members
    # at 0.44-0.60 AUC on seed 0 with any converged attack classifier (L2 from 1e-3 to 1;
    # 0.65-0.74 on seeds 1 and 2), while the disjoint setting holds 0.73 on all three: one
    # shadow of ~22 members is not a world the target's 2-hop answers resemble
    ("mia-shadow", {"trained_as": "centralized"}),
    ("mia-lira", {"mode": "online", "num_references": REFS}),
    ("mia-lira", {"mode": "offline", "num_references": REFS, "hops": 2}),
    ("mia-rmia", {"mode": "offline", "num_references": REFS}),
    ("mia-rmia", {"mode": "online", "num_references": REFS, "hops": 2}),
    ("mia-lira", {"mode": "online", "num_references": REFS, "trained_as": "centralized"}),
]
IDS = [f"{n}-{'-'.join(map(str, p.values()))}" for n, p in CASES]
# the costliest cases (50-75 s each on CI's two cores) run with -m slow; every attack and
# setting keeps a default case: shadow with label_aware off, LiRA online on the target's recipe
SLOW = {"mia-shadow-full", "mia-lira-online-8-centralized"}
PARAMS = [
    pytest.param(n, p, id=i, marks=[pytest.mark.slow] if i in SLOW else [])
    for (n, p), i in zip(CASES, IDS, strict=True)
]


@pytest.fixture(scope="module")
def pool():
    return ReferencePool(jobs=1, seed=7)


def attack_input(fed, trained, challenge, pool, adversary="querier") -> AttackInput:
    view = server_view(trained, fed) if adversary == "server" else querier_view(trained, fed)
    return AttackInput(view, background_knowledge(fed, trained), challenge.candidates, pool)


def run(name, params, inp, seed=0):
    attack = ATTACKS.get(name)
    return attack.run(inp, attack.Config(**params), seed)


@pytest.mark.parametrize(("name", "params"), PARAMS)
def test_every_attack_detects_an_overfit_target(overfit, pool, name, params):
    fed, trained = overfit
    challenge = membership_challenge(fed, seed=0)
    out = run(name, params, attack_input(fed, trained, challenge, pool))
    metrics, _ = membership_metrics(out.scores, challenge.is_member, out.threshold)
    assert metrics["auc"] > 0.65, metrics
    assert metrics["auc_ci_low"] > 0.55


@pytest.mark.parametrize(("name", "params"), PARAMS)
def test_no_signal_when_the_target_never_trained_on_either_side(overfit, pool, name, params):
    """'Members' and non-members are both drawn from records no client trained on."""
    fed, trained = overfit
    unseen = np.concatenate([c.test for c in fed.partition.clients])
    rng = np.random.default_rng(1)
    fake = rng.random(unseen.size) < 0.5
    real = membership_challenge(fed, seed=0)
    cands = dataclasses.replace(
        real.candidates, ids=unseen, labels=fed.dataset.labels[unseen], graphs=()
    )
    challenge = Challenge(cands, fake, np.zeros(unseen.size, int))
    out = run(name, params, attack_input(fed, trained, challenge, pool))
    # Bonferroni over the cases: each interval at 1 - 0.05/len(CASES).
    low, high = auc_interval(out.scores, fake, confidence=1 - 0.05 / len(CASES))
    assert low < 0.5 < high, (low, high)


def shuffled_membership(fed):
    """The same federation with every client's train/test labels reassigned at random: the
    target stays the one trained on the real split."""
    rng = np.random.default_rng(5)
    clients = []
    for c in fed.partition.clients:
        pooled = rng.permutation(np.concatenate([c.train, c.test]))
        train, test = np.sort(pooled[: c.train.size]), np.sort(pooled[c.train.size :])
        clients.append(ClientPart(c.client_id, c.ids, train, c.val, test))
    part = dataclasses.replace(fed.partition, clients=tuple(clients))
    return build_federation(fed.dataset, part)


@pytest.mark.parametrize("adversary", ["querier", "server"])
@pytest.mark.parametrize(("name", "params"), PARAMS)
def test_scores_do_not_depend_on_membership_labels(overfit, pool, name, params, adversary):
    fed, trained = overfit
    params = {**params, "adversary": adversary}
    scores = []
    for f in (fed, shuffled_membership(fed)):
        challenge = membership_challenge(f, seed=0)
        out = run(name, params, attack_input(f, trained, challenge, pool, adversary))
        order = np.argsort(challenge.candidates.ids)
        scores.append(out.scores[order])
    members = [
        set(membership_challenge(f, 0).candidates.ids[membership_challenge(f, 0).is_member])
        for f in (fed, shuffled_membership(fed))
    ]
    assert members[0] != members[1]
    # candidates come in another order, so pooled sums (LiRA's global variance) may differ in
    # the last bits; any use of the labels would move scores far more
    np.testing.assert_allclose(scores[0], scores[1], rtol=1e-10, atol=1e-12)


def test_server_scores_each_uploaded_model(overfit, pool):
    fed, trained = overfit
    challenge = membership_challenge(fed, seed=0)
    inp = attack_input(fed, trained, challenge, pool, "server")
    out = run("mia-threshold", {"adversary": "server"}, inp)
    per_model = out.details["per_model"]
    assert sorted(per_model) == [f"client:{k}" for k in range(3)]
    np.testing.assert_array_equal(out.scores, np.max(list(per_model.values()), axis=0))


# Centralized references are FedGC's node-level setting (a plain GCN on the released graph);
# at graph level their recipe (weight decay, dropout) differs from this overfit target's, and
# on its 60 training graphs LiRA with them is not reliably above chance (AUC 0.55 here).
GRAPH_CASES = [c for c in CASES if "hops" not in c[1] and "trained_as" not in c[1]]


@pytest.fixture(scope="module")
def overfit_graphs():
    """Graph level: few graphs with weak signal, a wide GIN trained long."""
    params = SyntheticGraphsParams(num_graphs=200, num_features=16, signal=0.1, seed=2)
    ds = synthetic_graphs(params)
    part = make_partition(ds, "iid", 2, seed=0, split=(0.3, 0.1, 0.6), aux_fraction=0.3)
    fed = build_federation(ds, part)
    cfg = {
        "rounds": 10,
        "local_epochs": 10,
        "weight_decay": 0.0,
        "release": "last",
        "model": {"dropout": 0.0},
    }
    return fed, TARGETS.get("fedavg").fit(fed, cfg, [], seed=0)


@pytest.mark.parametrize(("name", "params"), GRAPH_CASES, ids=[f"{n}-{p}" for n, p in GRAPH_CASES])
def test_graph_level_attacks_detect_an_overfit_target(overfit_graphs, pool, name, params):
    fed, trained = overfit_graphs
    challenge = membership_challenge(fed, seed=0)
    out = run(name, params, attack_input(fed, trained, challenge, pool))
    metrics, _ = membership_metrics(out.scores, challenge.is_member, out.threshold)
    assert metrics["auc"] > 0.6 and metrics["auc_ci_low"] > 0.5, metrics


@pytest.mark.parametrize(
    ("target", "params"),
    [("centralized", {"epochs": 2}), ("fedavg", {"rounds": 2, "keep_payloads": "none"})],
)
def test_server_attack_without_uploaded_weights_is_not_applicable(small_csbm, target, params):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0, aux_fraction=0.2))
    trained = TARGETS.get(target).fit(fed, params, [], seed=0)
    challenge = membership_challenge(fed, seed=0)
    inp = attack_input(fed, trained, challenge, None, "server")
    with pytest.raises(NotApplicableError, match="no model weights"):
        run("mia-threshold", {"adversary": "server"}, inp)


def test_label_aware_shadow_features_tell_a_confident_wrong_answer_from_a_right_one():
    import torch

    from fgl_workbench.attacks.membership.shadow import attack_features

    logits = torch.tensor([[5.0, 0.0, 0.0], [5.0, 0.0, 0.0]])
    blind = attack_features(logits, None)
    aware = attack_features(logits, np.array([0, 1]))
    assert (blind[0] == blind[1]).all()  # the sorted posteriors alike
    assert aware.shape == (2, 4) and aware[0, -1] > 0.9 > 0.1 > aware[1, -1]


@pytest.mark.parametrize(("serves_on", "setting"), [("tstf", "tstf"), ("tsts", "disjoint")])
def test_shadow_attack_in_olatunji_et_al_settings(overfit, pool, serves_on, setting):
    """An inductive target answering as it was deployed in the paper, and a shadow queried
    the same way: the shadow trains inductively too (the recipe is known)."""
    fed, _ = overfit
    cfg = {"epochs": 100, "release": "last", "weight_decay": 0.0, "inductive": True}
    trained = TARGETS.get("centralized").fit(fed, {**cfg, "serves_on": serves_on}, [], 0)
    assert trained.recipe.config["inductive"]
    challenge = membership_challenge(fed, seed=0)
    out = run(
        "mia-shadow", {"setting": setting, "hops": 2}, attack_input(fed, trained, challenge, pool)
    )
    metrics, _ = membership_metrics(out.scores, challenge.is_member, out.threshold)
    # 0.98 and 0.99 measured: members answered on their own sparse subgraph look unlike
    # non-members answered on another graph, whatever the model learned
    assert metrics["auc_ci_low"] > 0.85, metrics
