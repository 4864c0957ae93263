import pytest
import torch
from torch.distributions import Normal, kl_divergence

from fgl_workbench.attacks import ATTACKS
from fgl_workbench.attacks.metrics import membership_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.information_bottleneck import (
    IB_HEAD,
    IBConfig,
    IBEncoder,
    kl_to_standard_normal,
    shared_head,
    transform_clients,
)
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import SERVER

FAST = {"epochs": 60, "head_hidden": 32, "lr": 0.01}


def test_kl_is_the_closed_form():
    mu, sigma = torch.randn(5, 3), torch.rand(5, 3) + 0.1
    expected = kl_divergence(Normal(mu, sigma), Normal(0.0, 1.0)).sum(1)
    torch.testing.assert_close(kl_to_standard_normal(mu, sigma), expected)
    assert float(kl_to_standard_normal(torch.zeros(2, 4), torch.ones(2, 4)).abs().max()) == 0.0


def test_head_is_shared_and_frozen():
    cfg = IBConfig(**FAST)
    a, b = shared_head(cfg, 16, 4), shared_head(cfg, 16, 4)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q) and not p.requires_grad
    other = shared_head(IBConfig(**FAST, head_seed=1), 16, 4)
    flat = [torch.cat([p.reshape(-1) for p in m.parameters()]) for m in (a, other)]
    assert not torch.equal(*flat)


@pytest.fixture(scope="module")
def federation(small_csbm):
    part = make_partition(small_csbm, "metis", 3, 0, aux_fraction=0.2)
    return build_federation(small_csbm, part)


def test_transform_replaces_features_and_gamma_compresses(federation, small_csbm):
    head = shared_head(IBConfig(**FAST), 16, 4)
    small, kl_small = transform_clients(federation.clients, IBConfig(**FAST, gamma=0.0), head, 0)
    big, kl_big = transform_clients(federation.clients, IBConfig(**FAST, gamma=1.0), head, 0)
    for before, after in zip(federation.clients, small, strict=True):
        z = after.data.x
        assert z.shape == before.data.x.shape and not torch.equal(z, before.data.x)
        torch.testing.assert_close(z.mean(0), torch.zeros(z.shape[1]), atol=1e-4, rtol=0)
        assert torch.equal(after.data.edge_index, before.data.edge_index)  # structure unchanged
    assert kl_big < 0.7 * kl_small  # a heavier KL weight leaves less information in Z


def test_fedavg_with_ib(federation):
    ib = applied("information-bottleneck", FAST)
    trained = TARGETS.get("fedavg").fit(federation, {"rounds": 10}, [ib], seed=0)
    assert trained.utility["accuracy"] > 0.5  # four classes: chance is 0.25
    assert trained.utility["ib_kl_nats"] > 0
    heads = [m for m in trained.transcript.messages if m.kind == IB_HEAD]
    assert len(heads) == 3 and all(m.sender == SERVER for m in heads)
    assert trained.ledger.is_empty  # no formal guarantee: no ε
    with pytest.raises(ConfigError, match="node-level"):
        graphs = build_federation(*_graph_level())
        TARGETS.get("fedavg").fit(graphs, {}, [ib], 0)


def _graph_level():
    from fgl_workbench.data.synthetic import SyntheticGraphsParams, synthetic_graphs

    ds = synthetic_graphs(SyntheticGraphsParams(num_graphs=30, seed=0))
    return ds, make_partition(ds, "iid", 2, 0)


ADAPTIVE = [
    ("mia-threshold", {}),
    ("mia-shadow", {"trained_as": "centralized"}),
    ("mia-lira", {"trained_as": "centralized", "num_references": 4}),
]


@pytest.mark.parametrize(("name", "params"), ADAPTIVE, ids=[n for n, _ in ADAPTIVE])
def test_adaptive_attacker_queries_in_z_space(federation, querier_input, name, params):
    ib = applied("information-bottleneck", FAST)
    cfg = {"rounds": 10}

    def attack(trained, features):
        inp, _ = querier_input(federation, trained)
        config = ATTACKS.get(name).Config(features=features, **params)
        return ATTACKS.get(name).run(inp, config, 0)

    defended = TARGETS.get("fedavg").fit(federation, cfg, [ib], seed=0)
    raw, adaptive = attack(defended, "raw"), attack(defended, "ib-surrogate")
    assert raw.scores.shape == adaptive.scores.shape
    assert not (raw.scores == adaptive.scores).all()
    truth = querier_input(federation, defended)[1].is_member
    for out in (raw, adaptive):
        assert 0.0 <= membership_metrics(out.scores, truth)[0]["auc"] <= 1.0
    plain = TARGETS.get("fedavg").fit(federation, cfg, [], seed=0)
    with pytest.raises(NotApplicableError, match="information-bottleneck"):
        attack(plain, "ib-surrogate")


def test_a_narrower_encoder_keeps_z_in_the_feature_space(federation):
    from fgl_workbench.defenses.information_bottleneck import IBEncoder

    enc = IBEncoder(16, hidden=4)
    assert enc.w1.weight.shape == (4, 16) and enc.w2.weight.shape == (32, 4)
    cfg = IBConfig(**FAST, hidden=4)
    out, kl = transform_clients(federation.clients, cfg, shared_head(cfg, 16, 4), 0)
    assert all(
        a.data.x.shape == b.data.x.shape for a, b in zip(out, federation.clients, strict=True)
    )
    assert kl > 0


def test_the_encoder_aggregates_with_the_graphs_cached_operator(small_csbm, monkeypatch):
    """The encoder's Â·h is GCN's normalised product (as PyG's ``gcn_norm`` weighs it),
    built once per graph: equal to the product renormalised at every forward, gradients
    flow to the features, and a second forward on the same graph builds nothing."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    from fgl_workbench.models import sparse

    data = small_csbm.data
    edge_index = data.edge_index.clone()  # a graph no operator was built for yet
    built = []
    real = sparse.build_operator
    monkeypatch.setattr(sparse, "build_operator", lambda *a: built.append(1) or real(*a))
    torch.manual_seed(0)
    encoder = IBEncoder(data.num_features, 8)
    x = data.x.clone().requires_grad_(True)
    mu, sigma = encoder(x, edge_index)
    (mu.sum() + sigma.sum()).backward()
    encoder(data.x, edge_index)
    assert built == [1] and x.grad.abs().sum() > 0
    with torch.no_grad():
        h = encoder.w2(torch.relu(encoder.w1(data.x)))
        ei, w = gcn_norm(data.edge_index, num_nodes=x.size(0), add_self_loops=True)
        z = torch.sparse.mm(torch.sparse_coo_tensor(ei.flip(0), w, (x.size(0),) * 2), h)
    torch.testing.assert_close(mu.detach(), z[:, : data.num_features])
