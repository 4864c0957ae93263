import dataclasses
import fcntl
from pathlib import Path

import pytest
import torch
import torch_geometric.datasets as pyg_datasets

from fgl_workbench.data.catalog import DATASETS, load_dataset
from fgl_workbench.errors import ConfigError, DatasetNotFoundError


@pytest.mark.parametrize(
    ("name", "items", "features", "classes", "edges"),
    [("Cora", 2708, 1433, 7, 10556), ("CiteSeer", 3327, 3703, 6, 9104)],
)
def test_planetoid_statistics(data_root: Path, name, items, features, classes, edges):
    ds = load_dataset(name, root=data_root)
    assert (ds.num_items, ds.num_features, ds.num_classes) == (items, features, classes)
    assert ds.data.edge_index.size(1) == edges


@pytest.mark.parametrize(
    ("name", "graphs", "nodes", "classes"),
    [("MUTAG", 188, 3371, 2), ("PROTEINS", 1113, 43471, 2)],
)
def test_tu_statistics(data_root: Path, name, graphs, nodes, classes):
    ds = load_dataset(name, root=data_root)
    assert ds.num_items == graphs
    assert sum(g.num_nodes for g in ds.graphs) == nodes
    assert ds.num_classes == classes


def test_imdb_gets_one_hot_degree_features(data_root: Path):
    ds = load_dataset("IMDB-BINARY", {"max_degree": 32}, root=data_root)
    g = ds.graphs[0]
    assert g.x.shape == (g.num_nodes, 33)
    assert (g.x.sum(1) == 1).all()


def test_node_graphs_are_symmetrised(data_root: Path):
    ds = load_dataset("Cornell", root=data_root)
    ei = ds.data.edge_index
    pairs = set(zip(ei[0].tolist(), ei[1].tolist(), strict=True))
    assert all((v, u) in pairs for u, v in pairs)


def test_node_features_row_normalised_on_request(data_root: Path):
    raw = load_dataset("Cora", root=data_root).data.x
    scaled = load_dataset("Cora", {"normalize_features": True}, root=data_root).data.x
    assert set(raw.unique().tolist()) == {0.0, 1.0}  # bag of words, as shipped
    assert torch.allclose(scaled.sum(1), torch.ones(raw.shape[0]))
    assert torch.allclose(scaled * raw.sum(1, keepdim=True), raw)


def test_raw_folder_is_never_written(data_root: Path):
    load_dataset("Cora", root=data_root)
    assert not (data_root / "Cora" / "processed").exists()


def test_missing_dataset_error_names_dataset_folder_and_files(tmp_path, monkeypatch):
    def offline(self):
        raise OSError("network unreachable")

    monkeypatch.setattr(pyg_datasets.Planetoid, "download", offline)
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("PubMed", root=tmp_path)
    msg = str(err.value)
    assert "PubMed" in msg and str(tmp_path / "PubMed" / "raw") in msg
    assert "ind.pubmed.allx" in msg


def test_unknown_dataset_lists_choices():
    with pytest.raises(ConfigError, match="valid choices: .*Cora"):
        load_dataset("Coraa")


def test_bad_params_name_the_dataset():
    with pytest.raises(ConfigError, match="csbm"):
        load_dataset("csbm", {"num_nodes": -5})


def test_catalog_has_the_issue_datasets():
    node = {"Cora", "CiteSeer", "PubMed", "Actor", "Cornell", "Texas", "Wisconsin", "csbm"}
    tu = {"MUTAG", "PROTEINS", "ENZYMES", "IMDB-BINARY", "IMDB-MULTI", "NCI1", "PTC_MR", "AIDS"}
    wanted = node | tu | {"BZR", "COX2", "synthetic-graphs"}
    assert wanted <= set(DATASETS.names())


def test_graph_mixture_pads_features_and_separates_labels(data_root: Path):
    from fgl_workbench.data.partition import make_partition

    mix = load_dataset("graph-mixture", {"members": ["MUTAG", "PTC_MR"]}, root=data_root)
    assert mix.num_items == 188 + 344 and mix.num_classes == 4
    assert mix.num_features == 18  # PTC_MR's width; MUTAG's 7 columns are zero-padded
    assert set(mix.labels[mix.source == 0]) == {0, 1}
    assert set(mix.labels[mix.source == 1]) == {2, 3}
    part = make_partition(mix, "cross-dataset", 4, seed=0)
    assert [len(set(mix.source[c.ids])) for c in part.clients] == [1, 1, 1, 1]
    with pytest.raises(ConfigError, match="not a graph dataset"):
        load_dataset("graph-mixture", {"members": ["MUTAG", "Cora"]}, root=data_root)


def test_graph_mixture_can_give_each_member_columns_of_its_own(data_root: Path):
    """``features: disjoint``: MUTAG's 7 columns first, PTC_MR's 18 after them, each member's
    features unchanged in its block and zero elsewhere."""
    params = {"members": ["MUTAG", "PTC_MR"]}
    mix = load_dataset("graph-mixture", {**params, "features": "disjoint"}, root=data_root)
    overlap = load_dataset("graph-mixture", params, root=data_root)
    assert mix.num_features == 7 + 18
    mutag, ptc = mix.graphs[0], mix.graphs[-1]
    assert int(mutag.source) == 0 and int(ptc.source) == 1
    torch.testing.assert_close(mutag.x[:, :7], overlap.graphs[0].x[:, :7])
    assert not mutag.x[:, 7:].any() and not ptc.x[:, :7].any()
    torch.testing.assert_close(ptc.x[:, 7:], overlap.graphs[-1].x)


def test_processing_holds_a_lock_other_processes_wait_on(data_root: Path, tmp_path, monkeypatch):
    """Parallel suites (or Ray workers) process the same dataset at once: while one process
    builds, the dataset's lock is taken, so another cannot read half-written processed/ files."""
    monkeypatch.setenv("FGLWB_CACHE", str(tmp_path / "cache"))
    spec = DATASETS.get("Cora")
    seen: list[bool] = []

    def build(folder, params):
        for lock in (tmp_path / "cache" / "locks").glob("*.lock"):
            with open(lock) as other:  # a second open file description, as another process has
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    seen.append(False)
                except BlockingIOError:
                    seen.append(True)
        return spec.build(folder, params)

    monkeypatch.setitem(DATASETS._items, "Cora", dataclasses.replace(spec, build=build))
    load_dataset("Cora", root=data_root)
    assert seen == [True]
