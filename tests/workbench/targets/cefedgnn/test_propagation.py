import numpy as np
import pytest
import torch
from torch_geometric.utils import degree as node_degree

from fgl_workbench.data.partition import ClientPart, make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.targets.cefedgnn.halo import halo_client
from fgl_workbench.targets.cefedgnn.propagation import Estimators, coefficients, estimated_logits

EMPTY = np.zeros(0, dtype=np.int64)


@pytest.fixture(scope="module")
def dataset():
    return csbm(CSBMParams(num_nodes=120, num_classes=3, num_features=8, seed=1))


def _degree(client):
    return node_degree(client.data.edge_index[1], client.num_nodes).long()


@pytest.mark.parametrize("arch", ["gcn", "sage"])
def test_one_client_full_neighbourhoods_and_gamma_one_is_the_plain_gnn(dataset, arch):
    everyone = np.arange(dataset.num_items)
    client = halo_client(dataset, ClientPart(0, everyone, everyone, EMPTY, EMPTY))
    model = ModelSpec(ModelConfig(arch=arch, hidden=16), 8, 3, "node").build().eval()
    est = Estimators.zeros(client.num_own, 16, 3)
    seeds = torch.arange(client.num_own)
    got = estimated_logits(
        model, client, est, torch.zeros(0, 16), _degree(client), seeds, 1.0, None
    )
    expected = model(dataset.data.x, dataset.data.edge_index)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_the_estimator_is_a_moving_average_and_remote_embeddings_carry_no_gradient(dataset):
    part = make_partition(dataset, "louvain", 2, 0)
    client = halo_client(dataset, part.clients[0])
    model = ModelSpec(ModelConfig(arch="sage", hidden=16), 8, 3, "node").build().eval()
    halo = torch.randn(client.num_nodes - client.num_own, 16, requires_grad=True)
    est = Estimators.zeros(client.num_own, 16, 3)
    seeds, deg = client.boundary, _degree(client)
    fresh = estimated_logits(model, client, est, halo, deg, seeds, 1.0, None).detach()
    assert est.touched[seeds].all()
    est.output[seeds] = 1.0  # the hidden estimators hold the fresh values: only this moves
    mixed = estimated_logits(model, client, est, halo, deg, seeds, 0.25, None)
    torch.testing.assert_close(mixed, 0.75 + 0.25 * fresh)
    mixed.sum().backward()
    assert halo.grad is None
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("arch", ["gcn", "sage"])
def test_thinned_neighbourhoods(dataset, arch):
    """GCN: the thinned coefficients are unbiased; SAGE: a mean over the kept neighbours.
    Either way about ``fanout`` of a node's neighbours are kept."""
    everyone = np.arange(dataset.num_items)
    client = halo_client(dataset, ClientPart(0, everyone, everyone, EMPTY, EMPTY))
    targets, deg = torch.arange(client.num_own), _degree(client)
    gcn = arch == "gcn"
    exact = coefficients(targets, client, deg, gcn, False, None, None).to_dense()
    gen = torch.Generator().manual_seed(0)
    draws = [coefficients(targets, client, deg, gcn, False, 2, gen) for _ in range(2000)]
    kept = np.mean([d.indices().shape[1] - gcn * targets.numel() for d in draws])
    assert abs(kept - 2 * targets.numel()) < 0.15 * 2 * targets.numel()
    if gcn:
        mean = torch.stack([d.to_dense() for d in draws]).mean(0)
        assert (mean - exact).abs().max() < 0.05
    else:
        rows = torch.stack([d.to_dense().sum(1) for d in draws])
        assert torch.allclose(rows[rows > 0], torch.ones(1))
