import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph, subgraph

from fgl_workbench.models import ModelConfig, build_model
from fgl_workbench.query import GraphQueryAPI, InductiveQueryAPI, KHop, NodeQueryAPI


@pytest.mark.parametrize("hops", [0, 1, 2])
@pytest.mark.parametrize("arch", ["gcn", "sage", "gat"])
def test_batched_queries_equal_one_subgraph_per_query(small_csbm, hops, arch):
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch=arch, hidden=16), small_csbm.num_features, 4, "node")
    model.eval()
    data = small_csbm.data
    ids = np.array([0, 5, 17, 200, 399, 5])
    got = NodeQueryAPI(model, data, chunk=4).logits(ids, hops)
    for row, i in zip(got, ids.tolist(), strict=True):
        subset, ei, mapping, _ = k_hop_subgraph(
            i, hops, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes
        )
        want = model(data.x[subset], ei)[mapping[0]]
        torch.testing.assert_close(row, want, rtol=1e-5, atol=1e-5)


def test_khop_batch_on_a_path():
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    nodes, bei, pos = KHop(ei, 5).batch(np.array([0, 2, 4]), 1)
    assert nodes.tolist() == [0, 1, 1, 2, 3, 3, 4]
    assert pos.tolist() == [0, 3, 6]
    assert bei.shape[1] == 8


def reference_khop(src, dst, centers, hops):
    """The definition, one center at a time: the nodes reached in ``hops`` steps along
    out-edges (sorted), every edge with both ends reached (edge order, then center)."""
    reached = []
    for c in centers.tolist():
        seen = {c}
        for _ in range(hops):
            seen |= {int(v) for u, v in zip(src, dst, strict=True) if u in seen}
        reached.append(sorted(seen))
    offsets = np.cumsum([0] + [len(r) for r in reached])
    edges = [
        (offsets[q] + r.index(int(u)), offsets[q] + r.index(int(v)))
        for e, (u, v) in enumerate(zip(src, dst, strict=True))
        for q, r in enumerate(reached)
        if u in r and v in r
    ]
    pairs = enumerate(zip(reached, centers.tolist(), strict=True))
    pos = [offsets[q] + r.index(c) for q, (r, c) in pairs]
    nodes = np.concatenate([np.array(r) for r in reached])
    return nodes, np.array(edges).T.reshape(2, -1), np.array(pos)


@pytest.mark.parametrize("hops", [0, 1, 2])
def test_khop_batches_follow_the_definition_with_loops_and_repeated_edges(hops):
    rng = np.random.default_rng(hops)
    ei = torch.as_tensor(rng.integers(0, 30, (2, 60)))
    ei = torch.cat([ei, torch.tensor([[3, 3, 8, 8], [3, 9, 9, 9]])], 1)  # a loop, a repeat
    centers = np.array([3, 8, 17, 8])
    got = KHop(ei, 30).batch(centers, hops)
    want = reference_khop(*ei.numpy(), centers, hops)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_query_rejects_out_of_range_ids(small_csbm):
    model = build_model(ModelConfig(), small_csbm.num_features, 4, "node")
    api = NodeQueryAPI(model, small_csbm.data)
    with pytest.raises(ValueError, match="node_ids"):
        api.logits(np.array([small_csbm.num_items]))
    with pytest.raises(ValueError, match="hops"):
        api.logits(np.array([0]), hops=-1)


def test_graph_query_matches_single_graph_forward(small_graphs):
    model = build_model(ModelConfig(), small_graphs.num_features, 2, "graph")
    model.eval()
    graphs = small_graphs.graphs[:7]
    got = GraphQueryAPI(model, batch_size=3).logits(graphs)
    for row, g in zip(got, graphs, strict=True):
        batch = torch.zeros(g.num_nodes, dtype=torch.long)
        torch.testing.assert_close(row, model(g.x, g.edge_index, batch)[0], rtol=1e-5, atol=1e-5)


def test_a_node_reached_by_256_paths_is_reached():
    """Reachability saturates: path counts kept in int8 wrapped to 0 and dropped the node."""
    src = [0] * 256 + list(range(1, 257))
    dst = list(range(1, 257)) + [300] * 256
    nodes, _, _ = KHop(torch.tensor([src, dst]), 301).batch(np.array([0]), 2)
    assert 300 in nodes.tolist() and nodes.size == 258


@pytest.mark.parametrize("mode", ["tstf", "tsts"])
def test_inductive_deployments_answer_each_side_on_its_own_graph(small_csbm, mode):
    """Olatunji et al.'s settings: a training node's 2-hop answer is the one the subgraph of
    the training nodes gives; another node's is the population graph's (TSTF) or the one the
    subgraph of the other nodes gives (TSTS)."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=16), small_csbm.num_features, 4, "node").eval()
    data = small_csbm.data
    train = np.arange(0, data.num_nodes, 3)
    rest = np.setdiff1d(np.arange(data.num_nodes), train)
    api = InductiveQueryAPI(model, data, train, mode)
    ids = np.array([0, 1, 3, 5, 399, 0])

    def on(nodes: np.ndarray, i: int) -> torch.Tensor:
        """Node i's 2-hop answer on the subgraph ``nodes`` induce."""
        keep = torch.as_tensor(nodes)
        ei, _ = subgraph(keep, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
        api = NodeQueryAPI(model, Data(x=data.x[keep], edge_index=ei, num_nodes=nodes.size))
        return api.logits(np.searchsorted(nodes, [i]), 2)[0]

    got = api.logits(ids, 2)
    everyone = NodeQueryAPI(model, data).logits(ids, 2)
    for row, full, i in zip(got, everyone, ids.tolist(), strict=True):
        side = train if i in train else rest
        want = full if mode == "tstf" and i not in train else on(side, i)
        torch.testing.assert_close(row, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, everyone)  # the sides' graphs differ from the population's
    table = api.answers([2], None)
    torch.testing.assert_close(table.logits(ids, 2), got)
    with pytest.raises(ValueError, match="mode"):
        InductiveQueryAPI(model, data, train, "tsft")


def test_answers_compute_embeddings_only_when_asked(small_csbm, monkeypatch):
    """A querier's answer tables: posteriors at each hop, and embeddings (a second forward
    pass over every neighbourhood) only for an attack that reads them."""
    from fgl_workbench.errors import NotApplicableError

    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="gcn", hidden=16), small_csbm.num_features, 4, "node")
    api = NodeQueryAPI(model, small_csbm.data)
    passes = []
    answer = api._answer
    monkeypatch.setattr(
        api, "_answer", lambda i, h, embed: passes.append(embed) or answer(i, h, embed)
    )
    ids = np.arange(small_csbm.data.num_nodes)
    table = api.answers((0, 1), small_csbm.data, embeddings=False)
    assert passes == [False, False]  # the logits at each hop, no embedding pass
    torch.testing.assert_close(table.logits(ids, 1), api.logits(ids, 1))
    with pytest.raises(NotApplicableError, match="signal: embedding"):
        table.embeddings(ids, 1)
    asked = api.answers((0, 1), small_csbm.data, embeddings=True)
    torch.testing.assert_close(asked.embeddings(ids, 1), api.embeddings(ids, 1))
