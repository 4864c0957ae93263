"""CE-FedGNN end to end on a small CSBM federation: equal to centralised SGD in the degenerate
case, learns, exchanges only updated boundary embeddings (and counts them), and its baselines
(stale embeddings, no gradient average, edges dropped, stand-alone clients) run."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fgl_workbench.accountants import (
    Gaussian,
    MetricGaussian,
    PrivacyLedger,
    epsilon,
    epsilons_by_adversary,
    metric_epsilons_by_adversary,
)
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import ClientPart, Partition, make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.defenses import applied
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.cefedgnn.target import noisy_mean
from fgl_workbench.transcript import EMBEDDINGS, SERVER

FAST = {
    "rounds": 10,
    "local_steps": 8,
    "batch_size": 32,
    "lr": 0.5,
    "model": {"arch": "sage", "hidden": 16},
}
EMPTY = np.zeros(0, dtype=np.int64)


@pytest.fixture(scope="module")
def dataset():
    return csbm(CSBMParams(num_nodes=300, num_classes=3, num_features=16, seed=2))


@pytest.fixture(scope="module")
def federation(dataset):
    return build_federation(dataset, make_partition(dataset, "louvain", 3, 0))


@pytest.mark.parametrize("arch", ["gcn", "sage"])
def test_one_client_no_averages_full_neighbourhoods_is_centralised_sgd(dataset, arch):
    ids = np.arange(dataset.num_items)
    rng = np.random.default_rng(0).permutation(ids)
    part = Partition(
        "node",
        "one",
        (ClientPart(0, ids, np.sort(rng[:100]), np.sort(rng[100:150]), np.sort(rng[150:])),),
        EMPTY,
    )
    fed = build_federation(dataset, part)
    model_cfg = {"arch": arch, "hidden": 16, "dropout": 0.0}
    cfg = {
        "rounds": 3,
        "local_steps": 5,
        "batch_size": 16,
        "fanout": None,
        "gamma": 1.0,
        "beta": 1.0,
        "lr": 0.1,
        "model": model_cfg,
    }
    trained = TARGETS.get("ce-fedgnn").fit(fed, cfg, [], seed=0)
    # the same draws, by hand: plain SGD on the PyG model over the whole graph
    seed_everything(derive_seed(0, "ce-fedgnn"))
    gen = torch.Generator().manual_seed(derive_seed(0, "ce-fedgnn/batches"))
    model = ModelSpec(ModelConfig(**model_cfg), 16, 3, "node").build()
    train = torch.from_numpy(part.clients[0].train)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(int(trained.utility["best_round"]) + 1):
        for _ in range(5):
            seeds = train[torch.randperm(train.numel(), generator=gen)[:16]]
            opt.zero_grad()
            out = model(dataset.data.x, dataset.data.edge_index)[seeds]
            F.cross_entropy(out, dataset.data.y[seeds]).backward()
            opt.step()
    for a, b in zip(
        model.state_dict().values(), trained.global_model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def trained(federation):
    return TARGETS.get("ce-fedgnn").fit(federation, FAST, [], seed=0)


def test_it_learns_and_releases_only_updated_boundary_embeddings(trained, federation):
    assert trained.utility["accuracy"] > 0.6  # 3 classes: chance is 1/3
    ups = [m for m in trained.transcript.messages if m.kind == EMBEDDINGS and m.receiver == SERVER]
    assert len(ups) == 3 * FAST["rounds"]
    owner = federation.partition.owner(federation.dataset.num_items)
    src, dst = federation.dataset.data.edge_index.numpy()
    boundary = set(src[owner[src] != owner[dst]].tolist())
    last = [m for m in ups if m.round == FAST["rounds"] - 1]
    for m in last:
        ids = set(m.payload["global_id"].tolist())
        assert ids <= boundary
        assert (owner[list(ids)] == int(m.sender.split(":")[1])).all()
    assert trained.utility["max_releases"] <= FAST["rounds"]
    assert trained.utility["mean_releases_boundary"] > 0


def test_routed_embeddings_reach_only_the_clients_that_hold_them(trained, federation):
    owner = federation.partition.owner(federation.dataset.num_items)
    src, dst = federation.dataset.data.edge_index.numpy()
    downs = [m for m in trained.transcript.messages if m.kind == EMBEDDINGS and m.sender == SERVER]
    assert downs
    for m in downs:
        if m.payload is None:
            continue
        k = int(m.receiver.split(":")[1])
        for v in m.payload["global_id"].tolist():
            assert owner[v] != k and k in owner[src[dst == v]]


@pytest.mark.parametrize(
    "variant",
    [{"gamma": 1.0}, {"beta": 1.0}, {"cross_edges": False}, {"federated": False}],
    ids=["stale", "no-gradient-average", "edges-dropped", "stand-alone"],
)
def test_baselines_run(federation, variant):
    t = TARGETS.get("ce-fedgnn").fit(federation, {**FAST, **variant}, [], seed=0)
    assert t.utility["accuracy"] > 0.4
    exchanged = any(m.kind == EMBEDDINGS for m in t.transcript.messages)
    assert exchanged == (variant.get("cross_edges", True) and variant.get("federated", True))


def test_same_seed_same_numbers_and_bad_models_refused(trained, federation):
    again = TARGETS.get("ce-fedgnn").fit(federation, FAST, [], seed=0)
    assert again.utility == trained.utility
    with pytest.raises(ConfigError, match="2-layer 'gcn' or 'sage'"):
        TARGETS.get("ce-fedgnn").fit(federation, {**FAST, "model": {"arch": "gat"}}, [], 0)


def test_zero_noise_is_the_noise_free_mean():
    gen = torch.Generator().manual_seed(0)
    vectors = [torch.full((4,), 10.0), torch.zeros(4)]  # the first's norm (20) exceeds the clip
    torch.testing.assert_close(noisy_mean(vectors, 0.0, 1.0, gen), torch.full((4,), 5.0))
    clipped = noisy_mean(vectors, 1e-12, 1.0, gen)
    torch.testing.assert_close(clipped, torch.full((4,), 0.25), atol=1e-6, rtol=0)


def test_noisy_averages_are_scoped(trained, federation):
    ce = TARGETS.get("ce-fedgnn")
    noisy = ce.fit(
        federation,
        {**FAST, "model_noise": 1e-3, "estimator_noise": 1e-3},
        [applied("metric-dp", {"sigma0": 0.05, "k": 10})],
        seed=0,
    )
    ups = [
        m
        for m in noisy.transcript.messages
        if m.kind == EMBEDDINGS and m.receiver == SERVER and m.payload is not None
    ]
    norms = torch.cat([m.payload["h"].norm(dim=1) for m in ups])
    assert ((norms - 1.0).abs() < 0.5).all()  # unit vectors plus N(0, 0.05² I) in 16 dims
    metric = [e for e in noisy.ledger.metric().events if isinstance(e, MetricGaussian)]
    assert [(e.sigma0, e.releases) for e in metric] == [(0.05, noisy.utility["max_releases"])]
    assert noisy.utility["best_round"] == FAST["rounds"] - 1  # under DP: the last round
    rows = {(r.adversary, r.unit): r for r in epsilons_by_adversary(noisy.ledger, 1e-5)}
    assert rows[("server", "client")].epsilon == math.inf  # it averages the clean uploads
    # cross-client edges: one client's embeddings reach every upload, sensitivity 2·clip
    gaussians = [e for e in noisy.ledger.events if isinstance(e, Gaussian)]
    assert [(e.sigma, e.sensitivity, e.count) for e in gaussians] == [
        (1e-3, 2 * 15.0, FAST["rounds"])
    ] * 2
    assert rows[("querier", "client")].epsilon == pytest.approx(
        epsilon(PrivacyLedger(tuple(gaussians)), 1e-5).epsilon
    )
    rho = noisy.utility["metric_rho"]
    assert 0 < rho <= 2.0
    assert trained.ledger.is_empty
    with pytest.raises(ConfigError, match="ce-fedgnn cannot apply 'dp-fedavg'"):
        ce.fit(federation, FAST, [applied("dp-fedavg", {})], 0)


@pytest.mark.parametrize("metric_dp", [False, True])
def test_the_boundary_exchange_leaves_no_epsilon_against_those_it_reaches(federation, metric_dp):
    """The exchange sends boundary nodes' exact degrees (and, without metric-DP, their hidden
    states) to the server, which routes them to the halo holders: the ledger scoped its
    Gaussian to clients and the querier, and printed a finite ε against clients. Now ε is
    ∞ against the server and clients at every unit, standard and metric-DP alike, with the
    reason; the querier keeps the noisy averages' ε. Without cross-client edges nothing is
    exchanged and the clients' ε stays."""
    ce = TARGETS.get("ce-fedgnn")
    noise = {**FAST, "model_noise": 1e-2, "estimator_noise": 1e-2}
    defenses = [applied("metric-dp", {"sigma0": 0.5, "k": 10})] if metric_dp else []
    noisy = ce.fit(federation, noise, defenses, seed=0)
    rows = {(r.adversary, r.unit): r for r in epsilons_by_adversary(noisy.ledger, 1e-5)}
    gaussians = [e for e in noisy.ledger.events if isinstance(e, Gaussian)]
    finite = epsilon(PrivacyLedger(tuple(gaussians)), 1e-5).epsilon
    assert rows[("querier", "client")].epsilon == pytest.approx(finite)
    for who in ("clients", "server"):
        assert rows[(who, "client")].epsilon == math.inf
        assert "exact degrees" in rows[(who, "client")].note
    if metric_dp:
        rho = noisy.utility["metric_rho"]
        metric = {r.adversary: r for r in metric_epsilons_by_adversary(noisy.ledger, 1e-5, rho)}
        assert {r.unit for r in metric.values()} == {"node"}
        assert metric["server"].epsilon == metric["clients"].epsilon == math.inf
        assert "exact degrees" in metric["clients"].note
        # the released model is trained on the clean states: no ε(ρ) for its querier
        assert metric["querier"].epsilon == math.inf
    apart = ce.fit(federation, {**noise, "cross_edges": False}, defenses, seed=0)
    rows = {(r.adversary, r.unit): r for r in epsilons_by_adversary(apart.ledger, 1e-5)}
    assert math.isfinite(rows[("clients", "client")].epsilon)


def test_the_recipe_rebuilds_the_released_model(trained, federation):
    again = TARGETS.get("ce-fedgnn").fit(federation, trained.recipe.config, [], seed=0)
    for a, b in zip(
        again.global_model.state_dict().values(),
        trained.global_model.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_released_last_only_the_last_rounds_validation_is_scored(trained, federation, monkeypatch):
    """The recipe releases the last round (as reference models train): nothing selects on
    the other rounds' validation, so only the last round's is scored (its val_accuracy is
    reported), and the model is the one trained before."""
    from fgl_workbench.targets.cefedgnn.target import CEFedGNN

    splits = []
    score = CEFedGNN._score
    monkeypatch.setattr(
        CEFedGNN, "_score", staticmethod(lambda *a: splits.append(a[-1]) or score(*a))
    )
    again = TARGETS.get("ce-fedgnn").fit(federation, trained.recipe.config, [], seed=0)
    assert trained.recipe.config["rounds"] > 1 and splits == ["val", "test"]
    for a, b in zip(
        again.global_model.state_dict().values(),
        trained.global_model.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b)
