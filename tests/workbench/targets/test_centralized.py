import dataclasses

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.centralized import pooled_client, training_graph
from fgl_workbench.targets.training import graph_logits


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


def test_inductive_training_never_sees_a_non_member(small_csbm):
    """Olatunji et al.'s target: its weights do not depend on the test nodes at all, while
    the transductive model's (the test nodes are neighbours in its graph) do."""
    part = make_partition(small_csbm, "louvain", 3, seed=0)
    test = np.concatenate([c.test for c in part.clients])
    changed = small_csbm.data.clone()
    changed.x[torch.as_tensor(test)] = torch.randn(test.size, changed.x.size(1))
    other = dataclasses.replace(small_csbm, data=changed)

    def weights(dataset, inductive: bool) -> list[torch.Tensor]:
        cfg = {"epochs": 20, "release": "last", "inductive": inductive}
        trained = TARGETS.get("centralized").fit(build_federation(dataset, part), cfg, [], 0)
        return list(trained.global_model.state_dict().values())

    def unchanged(inductive: bool) -> bool:
        pairs = zip(weights(small_csbm, inductive), weights(other, inductive), strict=True)
        return all(torch.equal(a, b) for a, b in pairs)

    assert unchanged(inductive=True)
    assert not unchanged(inductive=False)
    graph = training_graph(pooled_client(build_federation(small_csbm, part)), inductive=True)
    assert graph.num_nodes == sum(c.train.size for c in part.clients) == int(graph.train_mask.sum())


def test_a_mixture_is_scored_per_member_on_its_own_classes(data_root):
    """The centralised reference of a cross-dataset column reports each member's AUC, as the
    federated targets do: the member's test graphs, the member's label range."""
    mix = load_dataset("graph-mixture", {"members": ["MUTAG", "PTC_MR"]}, root=data_root)
    fed = build_federation(mix, make_partition(mix, "cross-dataset", 2, 0))
    trained = TARGETS.get("centralized").fit(fed, {"epochs": 2}, [], seed=0)
    model, pooled = trained.global_model, pooled_client(fed)
    for d, name in enumerate(["MUTAG", "PTC_MR"]):
        graphs = [g for g in pooled.test if int(g.source) == d]
        y = np.array([int(g.y) for g in graphs]) - 2 * d  # each member's two labels, offset
        own = graph_logits(model, graphs)[:, 2 * d : 2 * d + 2].softmax(1)[:, 1]
        assert trained.utility[f"auc/{name}"] == roc_auc_score(y, own.numpy())


def test_released_last_only_the_last_epochs_validation_is_scored(small_csbm, monkeypatch):
    """At node level, released ``last``, nothing selects on the earlier epochs' validation:
    only the last epoch's is scored, the reported val_accuracy of the released model."""
    from fgl_workbench.targets import centralized

    fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    splits = []
    score = centralized.score_node_clients

    def counted(model, clients, split):
        splits.append(split)
        return score(model, clients, split)

    monkeypatch.setattr(centralized, "score_node_clients", counted)
    got = TARGETS.get("centralized").fit(fed, {"epochs": 5, "release": "last"}, [], 0)
    assert splits == ["val", "test"]
    val = score(got.global_model, [pooled_client(fed)], "val")["accuracy"]
    assert got.utility["val_accuracy"] == val > 0
