import numpy as np

from workbench.data.federation import build_federation
from workbench.data.partition import make_partition
from workbench.targets import TARGETS
from workbench.targets.centralized import pooled_client


def test_pooled_graph_keeps_cut_edges_and_every_split(small_csbm):
    part = make_partition(small_csbm, "louvain", 4, seed=0, aux_fraction=0.1)
    fed = build_federation(small_csbm, part)
    pooled = pooled_client(fed)
    assert pooled.data.train_mask.sum() == sum(c.train.size for c in part.clients)
    assert pooled.data.test_mask.sum() == sum(c.test.size for c in part.clients)
    local_edges = sum(c.data.edge_index.size(1) for c in fed.clients)
    assert pooled.data.edge_index.size(1) > local_edges  # cut edges are back
    assert not np.isin(part.aux_ids, pooled.data.global_id.numpy()).any()


def test_centralized_learns_and_releases_its_best_epoch(small_csbm, small_graphs):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, seed=0))
    trained = TARGETS.get("centralized").fit(fed, {"epochs": 30}, [], seed=0)
    assert trained.utility["accuracy"] > 0.5  # 4 classes: chance is 0.25
    assert trained.recipe.config["epochs"] == trained.utility["best_round"] + 1
    assert trained.recipe.train_size == int(pooled_client(fed).data.train_mask.sum())
    assert not trained.transcript.messages
    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 2, seed=0))
    trained = TARGETS.get("centralized").fit(fed, {"epochs": 3}, [], seed=0)
    assert trained.level == "graph" and 0.0 <= trained.utility["accuracy"] <= 1.0
