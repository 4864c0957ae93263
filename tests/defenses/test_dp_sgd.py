import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch

from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian, epsilon
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
    linear_per_graph_gradients,
    per_graph_gradients,
    private_optimizer,
)
from fgl_workbench.errors import ConfigError
from fgl_workbench.models.graph import GIN
from fgl_workbench.targets import TARGETS


@pytest.fixture(scope="module")
def graphs(small_graphs):
    return list(small_graphs.graphs)[:24]


def test_per_graph_gradients_sum_to_the_batch_gradient(graphs, small_graphs):
    torch.manual_seed(0)
    model = GIN(small_graphs.num_features, 16, small_graphs.num_classes).eval()
    per_graph = per_graph_gradients(model, graphs)
    b = Batch.from_data_list(graphs)
    loss = F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1), reduction="sum")
    whole = torch.autograd.grad(loss, list(model.parameters()))
    for g, w in zip(per_graph, whole, strict=True):
        assert g.shape[0] == len(graphs)
        torch.testing.assert_close(g.sum(0), w, rtol=1e-4, atol=1e-5)


def _one_at_a_time(model, graphs):
    rows = []
    for g in graphs:
        b = Batch.from_data_list([g])
        loss = F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1))
        rows.append(torch.autograd.grad(loss, list(model.parameters())))
    return [torch.stack(r) for r in zip(*rows, strict=True)]


def test_one_pass_gives_each_graphs_own_gradient(graphs, small_graphs):
    """The GIN's per-graph gradients from one pass over the batch equal each graph's gradient
    computed alone."""
    torch.manual_seed(0)
    model = GIN(small_graphs.num_features, 16, small_graphs.num_classes).eval()
    params = list(model.parameters())
    assert linear_per_graph_gradients(model, graphs, params) is not None  # the fast path ran
    pairs = zip(per_graph_gradients(model, graphs), _one_at_a_time(model, graphs), strict=True)
    for fast, slow in pairs:
        torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-6)


class _SharedLayer(torch.nn.Module):
    """One linear layer applied twice: its rows' gradients cannot be told apart per call."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(features, features)
        self.head = torch.nn.Linear(features, classes)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_mean_pool

        h = torch.relu(self.layer(torch.relu(self.layer(x))))
        return self.head(global_mean_pool(h, batch))


def test_a_model_outside_the_one_pass_rule_runs_graph_by_graph(graphs, small_graphs):
    torch.manual_seed(0)
    model = _SharedLayer(small_graphs.num_features, small_graphs.num_classes)
    assert linear_per_graph_gradients(model, graphs, list(model.parameters())) is None
    pairs = zip(per_graph_gradients(model, graphs), _one_at_a_time(model, graphs), strict=True)
    for fast, slow in pairs:
        torch.testing.assert_close(fast, slow)


def test_clipping_bounds_every_graph(graphs, small_graphs):
    """Opacus clips what we hand it: one graph's clipped contribution never exceeds C."""
    torch.manual_seed(0)
    model = GIN(small_graphs.num_features, 16, small_graphs.num_classes)
    cfg = DPSGDConfig(clip=0.05, noise_multiplier=1.0, sample_rate=0.5)
    opt = private_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), cfg, 24, None)
    params = list(model.parameters())
    raw_norms = []
    for g in graphs:
        grads = per_graph_gradients(model, [g])
        raw_norms.append(float(torch.cat([x.reshape(-1) for x in grads]).norm()))
        for p, x in zip(params, grads, strict=True):
            p.grad_sample = x
        opt.clip_and_accumulate()
        norm = torch.cat([p.summed_grad.reshape(-1) for p in params]).norm()
        assert float(norm) <= cfg.clip * (1 + 1e-5)
        opt.zero_grad()
    assert max(raw_norms) > 10 * cfg.clip  # so clipping did bind


@pytest.fixture(scope="module")
def federation(small_graphs):
    return build_federation(small_graphs, make_partition(small_graphs, "iid", 3, 0))


def test_ledger_gives_the_accountants_epsilon(federation):
    dp = applied("dp-sgd", {"clip": 1.0, "noise_multiplier": 1.2, "sample_rate": 0.25})
    cfg = {"rounds": 3, "local_epochs": 2, "keep_payloads": "none"}
    trained = TARGETS.get("fedavg").fit(federation, cfg, [dp], seed=0)
    steps = 3 * 2 * 4  # rounds × local epochs × ⌈1/q⌉, every client every round
    by_hand = epsilon(PrivacyLedger((SubsampledGaussian(0.25, 1.2, steps),)), 1e-5).epsilon
    assert epsilon(trained.ledger, 1e-5).epsilon == pytest.approx(by_hand, rel=1e-12)
    again = TARGETS.get("fedavg").fit(federation, cfg, [dp], seed=0)
    pairs = zip(trained.global_model.parameters(), again.global_model.parameters(), strict=True)
    for a, b in pairs:
        assert torch.equal(a, b)  # Opacus noise comes from our seeded generator


def test_refusals_are_clear(federation, small_csbm):
    dp_sgd = applied("dp-sgd", {})
    with pytest.raises(ConfigError, match="different neighbouring"):
        TARGETS.get("fedavg").fit(federation, {}, [dp_sgd, applied("dp-fedavg", {})], 0)
    nodes = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0))
    with pytest.raises(ConfigError, match="graph-level only"):
        TARGETS.get("fedavg").fit(nodes, {}, [dp_sgd], 0)


def test_a_batch_dominated_by_padding_runs_graph_by_graph(graphs, small_graphs):
    """One large graph would pad every small one to its size: the one pass declines, and the
    gradients are still each graph's own."""
    from torch_geometric.data import Data

    torch.manual_seed(0)
    big = Data(
        x=torch.randn(400, small_graphs.num_features),
        edge_index=torch.stack([torch.arange(399), torch.arange(1, 400)]),
        y=torch.tensor([0]),
    )
    batch = [big, *graphs[:8]]
    model = GIN(small_graphs.num_features, 8, small_graphs.num_classes).eval()
    assert linear_per_graph_gradients(model, batch, list(model.parameters())) is None
    pairs = zip(per_graph_gradients(model, batch), _one_at_a_time(model, batch), strict=True)
    for fast, slow in pairs:
        torch.testing.assert_close(fast, slow)
