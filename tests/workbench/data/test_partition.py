import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.datasets import GraphDataset
from fgl_workbench.data.node_partitioners import grouped_by_label_histogram
from fgl_workbench.data.partition import make_partition
from fgl_workbench.errors import ConfigError, PartitionError

NODE_METHODS = ["louvain", "leiden", "metis", "label-dirichlet", "louvain-plus", "metis-plus"]


def check_invariants(ds, part):
    n = ds.num_items
    ids = np.concatenate([c.ids for c in part.clients] + [part.aux_ids])
    assert np.array_equal(np.sort(ids), np.arange(n)), "every item assigned exactly once"
    for c in part.clients:
        assert np.intersect1d(c.ids, part.aux_ids).size == 0
        splits = np.concatenate([c.train, c.val, c.test])
        assert np.array_equal(np.sort(splits), c.ids), "splits cover the client exactly once"


def expected_cut(ds, part):
    owner = part.owner(ds.num_items)
    src, dst = ds.data.edge_index.numpy()
    keep = (owner[src] >= 0) & (owner[dst] >= 0) & (owner[src] != owner[dst]) & (src < dst)
    return {(int(u), int(v)) for u, v in zip(src[keep], dst[keep], strict=True)}


@pytest.mark.parametrize("method", NODE_METHODS)
def test_node_partition_invariants_on_cora(cora, method):
    part = make_partition(cora, method, 10, seed=0, aux_fraction=0.1)
    check_invariants(cora, part)
    cut = {(int(u), int(v)) for u, v in part.cut_edges.T}
    assert cut == expected_cut(cora, part)
    assert part.cut_edges.shape[1] > 0


@pytest.mark.parametrize("plus", ["louvain-plus", "metis-plus"])
def test_plus_partitions_give_whole_parts_to_clients(cora, plus):
    """Louvain+/Metis+ hand whole parts of an over-partition to clients, so client sizes
    are not balanced as Louvain's are; too few parts for the clients is an error."""
    part = make_partition(cora, plus, 10, seed=0)
    sizes = [c.ids.size for c in part.clients]
    assert len(sizes) == 10 and min(sizes) > 0 and max(sizes) > 1.5 * min(sizes)
    with pytest.raises(PartitionError, match="parts"):
        make_partition(cora, plus, 10, seed=0, params={"parts": 5})


def test_parts_with_the_same_label_mix_go_to_the_same_client(cora):
    """KMeans on label histograms: parts of class 0 and parts of class 3 make two pure
    clients."""
    zeros, threes = np.flatnonzero(cora.labels == 0), np.flatnonzero(cora.labels == 3)
    parts = [zeros[i::6] for i in range(6)] + [threes[i::5] for i in range(5)]
    clients = grouped_by_label_histogram(cora, parts, 2, np.random.default_rng(0))
    assert sorted(np.unique(cora.labels[c]).tolist() for c in clients) == [[0], [3]]


def test_cut_edges_and_kept_edges_cover_every_client_edge(cora):
    part = make_partition(cora, "louvain", 5, seed=1)
    stats = part.stats(cora)
    undirected = cora.data.edge_index.size(1) // 2
    assert sum(s.num_edges for s in stats) + part.cut_edges.shape[1] == undirected


@pytest.mark.parametrize("delta", [5, 20, 60])
@pytest.mark.parametrize(
    ("method", "params"),
    [("louvain", {}), ("louvain", {"engine": "igraph"}), ("leiden", {})],
)
def test_community_balance_within_delta(cora, delta, method, params):
    k = 10
    part = make_partition(cora, method, k, seed=0, params={"delta": delta, **params})
    sizes = [c.ids.size for c in part.clients]
    assert max(sizes) <= cora.num_items // k + delta


def test_igraph_engines_are_seeded_and_find_communities(cora):
    """Seeded (same seed, same clients; another seed, other clients) and community-aware:
    fewer edges cut than Metis-free random shares would cut (9/10 of them for 10 clients)."""
    for method, params in (("louvain", {"engine": "igraph"}), ("leiden", {})):
        a, b, c = (make_partition(cora, method, 10, s, params=params) for s in (0, 0, 1))
        assert all(np.array_equal(x.ids, y.ids) for x, y in zip(a.clients, b.clients, strict=True))
        assert any(
            not np.array_equal(x.ids, y.ids) for x, y in zip(a.clients, c.clients, strict=True)
        )
        edges = cora.data.edge_index.shape[1] // 2
        assert a.cut_edges.shape[1] < 0.5 * edges


def test_auxiliary_pool_is_stratified_and_disjoint(cora):
    part = make_partition(cora, "metis", 5, seed=0, aux_fraction=0.2)
    assert abs(part.aux_ids.size / cora.num_items - 0.2) < 0.01
    aux_hist = np.bincount(cora.labels[part.aux_ids], minlength=7) / part.aux_ids.size
    all_hist = np.bincount(cora.labels, minlength=7) / cora.num_items
    assert np.abs(aux_hist - all_hist).max() < 0.01


def test_split_is_stratified_per_client(cora):
    part = make_partition(cora, "louvain", 5, seed=0, split=(0.2, 0.4, 0.4))
    for c in part.clients:
        for label in np.unique(cora.labels[c.ids]):
            n = int((cora.labels[c.ids] == label).sum())
            assert int((cora.labels[c.train] == label).sum()) == int(0.2 * n)
            assert int((cora.labels[c.val] == label).sum()) == int(0.4 * n)


def test_public_split_reaches_the_clients_whole(cora):
    """Planetoid's 140/500/1000 nodes, each client holding its own nodes of each set, and the
    attacker's pool drawn only from the nodes outside the split."""
    train, val, test = cora.public_split
    assert (train.size, val.size, test.size) == (140, 500, 1000)
    part = make_partition(cora, "label-dirichlet", 10, seed=0, split="public", aux_fraction=0.2)
    for mine, public in zip(("train", "val", "test"), (train, val, test), strict=True):
        got = np.concatenate([getattr(c, mine) for c in part.clients])
        assert np.array_equal(np.sort(got), public)
    for c in part.clients:
        assert np.isin(np.concatenate([c.train, c.val, c.test]), c.ids).all()
    assert not np.isin(part.aux_ids, np.concatenate([train, val, test])).any()
    assert abs(part.aux_ids.size / cora.num_items - 0.2) < 0.01
    assert part.published_split  # the membership challenge class-matches its non-members
    assert not make_partition(cora, "label-dirichlet", 10, seed=0).published_split


def test_public_split_is_refused_where_there_is_none(small_csbm, cora):
    with pytest.raises(ConfigError, match="partition.split: 'public' needs a dataset"):
        make_partition(small_csbm, "louvain", 3, seed=0, split="public")
    with pytest.raises(ConfigError, match="partition.aux_fraction: 0.5 .* expected at most 0.394"):
        make_partition(cora, "louvain", 3, seed=0, split="public", aux_fraction=0.5)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.sampled_from(NODE_METHODS),
    k=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    aux=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_node_partitions_are_deterministic_and_complete(small_csbm, method, k, seed, aux):
    params = {"min_size": 5} if method == "label-dirichlet" else {}
    a = make_partition(small_csbm, method, k, seed, params=params, aux_fraction=aux)
    b = make_partition(small_csbm, method, k, seed, params=params, aux_fraction=aux)
    check_invariants(small_csbm, a)
    assert len(a.clients) == k
    for x, y in zip(a.clients, b.clients, strict=True):
        assert np.array_equal(x.ids, y.ids) and np.array_equal(x.train, y.train)
    assert np.array_equal(a.cut_edges, b.cut_edges)


def test_graph_partitions(small_graphs):
    for method, params in [("iid", {}), ("graph-dirichlet", {"alpha": 0.5, "min_size": 10})]:
        part = make_partition(small_graphs, method, 3, seed=0, params=params, aux_fraction=0.1)
        check_invariants(small_graphs, part)
        assert part.cut_edges.shape == (2, 0)


def test_dirichlet_raises_when_minimum_cannot_be_met(small_graphs):
    with pytest.raises(PartitionError, match="min_size"):
        make_partition(small_graphs, "graph-dirichlet", 10, 0, params={"min_size": 50})
    with pytest.raises(PartitionError, match="raise alpha"):
        make_partition(
            small_graphs,
            "graph-dirichlet",
            6,
            0,
            params={"alpha": 0.01, "min_size": 15, "max_tries": 3},
        )


def test_cross_dataset_gives_each_source_its_own_clients(small_graphs):
    graphs = []
    for source, g in enumerate(small_graphs.graphs):
        g = g.clone()
        g.source = source % 2
        graphs.append(g)
    mixed = GraphDataset("mix", graphs, 2, ("a", "b"))
    part = make_partition(mixed, "cross-dataset", 4, seed=0)
    check_invariants(mixed, part)
    for c in part.clients:
        assert np.unique(mixed.source[c.ids]).size == 1
    with pytest.raises(PartitionError, match="multiple"):
        make_partition(mixed, "cross-dataset", 3, seed=0)


def test_level_mismatch_is_a_config_error(small_graphs, small_csbm):
    with pytest.raises(ConfigError, match="graph-level"):
        make_partition(small_graphs, "louvain", 3, 0)
    with pytest.raises(ConfigError, match="valid choices"):
        make_partition(small_csbm, "louvian", 3, 0)


def test_stats_report_sizes_histograms_and_homophily(cora):
    part = make_partition(cora, "louvain", 5, seed=0)
    stats = part.stats(cora)
    assert [s.size for s in stats] == [c.ids.size for c in part.clients]
    assert all(sum(s.label_histogram) == s.size for s in stats)
    assert all(0.5 < s.edge_homophily <= 1.0 for s in stats)  # Cora is homophilous
