import pytest
import torch
from torch_geometric.nn import GCNConv, SAGEConv

from fgl_workbench.models import ModelConfig, build_model
from fgl_workbench.models import sparse as sparse_module
from fgl_workbench.models.node import SparseGCNConv, SparseSAGEConv


def awkward_graph() -> tuple[torch.Tensor, torch.Tensor]:
    """Features and edges of 7 nodes: nodes 5 and 6 isolated, self-loops on 0 and 3, a
    duplicated edge and one-way edges (in-degree differs from out-degree)."""
    torch.manual_seed(0)
    edges = [(0, 0), (0, 1), (1, 0), (1, 2), (2, 1), (3, 3), (2, 3), (4, 2), (1, 2), (0, 4)]
    return torch.randn(7, 5), torch.tensor(edges).T


def compare(ours: torch.nn.Module, theirs: torch.nn.Module, *extra: torch.Tensor) -> None:
    """Same weights, same output and the same gradients (parameters and input features)."""
    theirs.load_state_dict(ours.state_dict())
    x, edge_index = awkward_graph()
    grads = []
    for layer in (ours, theirs):
        xi = x.clone().requires_grad_()
        out = layer(xi, edge_index, *extra)
        (out * torch.arange(out.numel()).view_as(out)).sum().backward()  # a loss of every entry
        grads.append((out.detach(), xi.grad, {n: p.grad for n, p in layer.named_parameters()}))
    (a, gx_a, gp_a), (b, gx_b, gp_b) = grads
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(gx_a, gx_b)
    assert gp_a.keys() == gp_b.keys()
    for name in gp_a:
        torch.testing.assert_close(gp_a[name], gp_b[name])


def test_gcn_layer_matches_pygs_forward_and_gradients():
    compare(SparseGCNConv(5, 3), GCNConv(5, 3))


def test_sage_layer_matches_pygs_forward_and_gradients():
    compare(SparseSAGEConv(5, 3, aggr="mean"), SAGEConv(5, 3, aggr="mean"))


def test_weighted_edges_keep_pygs_path():
    _, edge_index = awkward_graph()
    compare(SparseGCNConv(5, 3), GCNConv(5, 3), torch.rand(edge_index.shape[1]))


@pytest.mark.parametrize("arch", ["gcn", "sage"])
def test_parameters_keep_pygs_names_and_shapes(arch):
    model = build_model(ModelConfig(arch=arch, hidden=8), 5, 3, "node")
    pyg = {"gcn": GCNConv, "sage": SAGEConv}[arch]
    for i, conv in enumerate(model.convs):
        assert isinstance(conv, pyg)
        reference = pyg(conv.in_channels, conv.out_channels)
        shapes = {n: t.shape for n, t in reference.state_dict().items()}
        assert {n: t.shape for n, t in conv.state_dict().items()} == shapes, i


@pytest.mark.parametrize("arch", ["gcn", "sage"])
def test_adjacency_is_built_once_per_graph(arch, monkeypatch):
    built = []
    real = sparse_module.build_operator

    def counted(edge_index, *args):
        built.append(edge_index)
        return real(edge_index, *args)

    monkeypatch.setattr(sparse_module, "build_operator", counted)
    x, edge_index = awkward_graph()
    model = build_model(ModelConfig(arch=arch, hidden=8), 5, 3, "node")
    opt = torch.optim.Adam(model.parameters())
    for _ in range(3):  # training steps, then an evaluation forward and an embedding
        opt.zero_grad()
        model(x, edge_index).sum().backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        model(x, edge_index)
        model.embed(x, edge_index)
    assert [id(e) for e in built] == [id(edge_index)]
    other = edge_index.flip(0)  # another graph gets its own
    model(x, other)
    assert [id(e) for e in built] == [id(edge_index), id(other)]
    edge_index[0, 1] = 2  # a graph changed in place is rebuilt, not answered from before
    model(x, edge_index)
    assert len(built) == 3


def test_double_precision_models_build_their_own_operator():
    x, edge_index = awkward_graph()
    model = build_model(ModelConfig(arch="gcn", hidden=8), 5, 3, "node").eval()
    single = model(x, edge_index)
    torch.testing.assert_close(model.double()(x.double(), edge_index).float(), single)


def test_unknown_operator_is_refused_naming_the_field():
    _, edge_index = awkward_graph()
    with pytest.raises(ValueError, match="kind"):
        sparse_module.build_operator(edge_index, 7, "max", torch.float32)
