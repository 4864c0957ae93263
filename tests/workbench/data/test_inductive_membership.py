"""Inductive membership (``partition.membership: inductive``): every target trains on the
subgraph its clients' training nodes induce, so no non-member (test node) and no edge of one
reaches training; transductive stays the default and unchanged."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch.nn.modules.module import register_module_forward_pre_hook

from fgl_workbench.data.federation import Federation, build_federation, node_client
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.errors import ConfigError
from fgl_workbench.running.components import BUILT_IN
from fgl_workbench.targets import TARGETS

STAGE = {"epochs": 4, "eval_every": 2, "patience": 1}
# the smallest run of every built-in target that trains on its clients' local graphs
TINY = {
    "fedavg": {"rounds": 2, "local_epochs": 1},
    "centralized": {"epochs": 3},
    "gap": {"encoder_rounds": 2, "rounds": 2, "local_epochs": 1},
    "opfgl": {
        "surrogate": {"iterations": 4},
        "stage1": {**STAGE, "lr": 0.01},
        "stage2": {**STAGE, "lr": 0.01},
    },
    "fedtad": {"rounds": 2, "outer_steps": 1, "student_steps": 1, "pseudo_nodes": 10},
    "fedgc": {"rounds": 2, "exchange_hops": 0, "eval_iterations": 4, "model": {"hidden": 16}},
    "flower": {"model": {"arch": "gcn", "hidden": 16}, "rounds": 2, "local_epochs": 1},
}
# targets that build training graphs from the population graph: they must refuse
REFUSING = {"ce-fedgnn": {}, "fedgc": {"exchange_hops": 2}}


@pytest.fixture(scope="module")
def dataset():
    return csbm(CSBMParams(num_nodes=240, num_classes=3, num_features=8, seed=5))


def federation(ds, membership: str = "inductive", **kw) -> Federation:
    part = make_partition(ds, "metis", 3, seed=0, aux_fraction=0.2, membership=membership, **kw)
    return build_federation(ds, part)


def test_inductive_clients_hold_only_their_training_and_validation_subgraphs(dataset):
    fed = federation(dataset)
    for c, p in zip(fed.clients, fed.partition.clients, strict=True):
        gid = c.data.global_id.numpy()
        assert np.array_equal(gid, np.union1d(p.train, p.val))
        assert not np.isin(gid, p.test).any()
        assert not c.data.test_mask.any()
        assert np.array_equal(gid[c.data.train_mask.numpy()], p.train)
        assert np.array_equal(gid[c.data.val_mask.numpy()], p.val)
        assert torch.equal(c.data.x, dataset.data.x[gid])
        src, dst = c.data.edge_index.numpy()
        train = c.data.train_mask.numpy()
        assert (train[src] == train[dst]).all()  # no edge joins a member to a validation node
        # every edge the training nodes induce is kept
        e = dataset.data.edge_index.numpy()
        inside = np.isin(e[0], p.train) & np.isin(e[1], p.train)
        assert int(train[src].sum()) == int(inside.sum())


def test_transductive_is_the_default_and_unchanged(dataset):
    part = make_partition(dataset, "metis", 3, seed=0, aux_fraction=0.2)
    default = build_federation(dataset, part)
    assert default.partition.membership == "transductive"
    explicit = federation(dataset, "transductive")
    for a, b, p in zip(default.clients, explicit.clients, default.partition.clients, strict=True):
        assert np.array_equal(a.data.global_id.numpy(), p.ids)
        for key in ("x", "edge_index", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(a.data[key], b.data[key])
        assert torch.equal(a.data.x, node_client(dataset, p).data.x)
    # the draws do not depend on the setting: the same records are members in both
    inductive = federation(dataset)
    for p, q in zip(default.partition.clients, inductive.partition.clients, strict=True):
        assert np.array_equal(p.train, q.train) and np.array_equal(p.test, q.test)


def test_membership_is_validated(dataset, small_graphs):
    with pytest.raises(ConfigError, match="partition.membership"):
        make_partition(dataset, "metis", 3, seed=0, membership="inductve")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="partition.membership: 'inductive' is a node-level"):
        make_partition(small_graphs, "iid", 3, seed=0, membership="inductive")


@contextmanager
def training_inputs() -> Iterator[list[torch.Tensor]]:
    """Every tensor any module is called with while it trains (grad on, training mode)."""
    seen: list[torch.Tensor] = []

    def hook(module: torch.nn.Module, args: tuple) -> None:
        if module.training and torch.is_grad_enabled():
            seen.extend(a.detach() for a in args if isinstance(a, torch.Tensor))

    handle = register_module_forward_pre_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def rows_seen(inputs: list[torch.Tensor], ds, ids: np.ndarray) -> int:
    """How many of the nodes ``ids`` had their feature row passed to a training forward
    (the csbm features are continuous: a row identifies its node)."""
    wanted = {row.tobytes() for row in ds.data.x[ids].numpy()}
    found: set[bytes] = set()
    width = ds.data.x.shape[1]
    for t in inputs:
        if t.dim() == 2 and t.shape[1] == width and t.is_floating_point():
            found |= {row.tobytes() for row in t.float().numpy()} & wanted
    return len(found)


def non_members(fed: Federation) -> np.ndarray:
    return np.concatenate([p.test for p in fed.partition.clients])


def test_the_check_sees_non_members_in_transductive_training(dataset):
    """The control that makes the next test able to fail: a transductive FedAvg's training
    forwards carry its test nodes' features (unlabelled in its graph)."""
    fed = federation(dataset, "transductive")
    with training_inputs() as seen:
        TARGETS.get("fedavg").fit(fed, TINY["fedavg"], [], 0)
    assert rows_seen(seen, dataset, non_members(fed)) == non_members(fed).size


@pytest.mark.parametrize("name", sorted(TINY))
def test_no_training_forward_of_an_inductive_target_sees_a_non_member(dataset, name):
    if name == "flower":
        pytest.importorskip("flwr")
    fed = federation(dataset)
    with training_inputs() as seen:
        trained = TARGETS.get(name).fit(fed, TINY[name], [], 0)
    assert seen, "the hook saw no training forward"
    assert rows_seen(seen, dataset, non_members(fed)) == 0
    members = np.concatenate([p.train for p in fed.partition.clients])
    assert rows_seen(seen, dataset, members) > 0  # the check does see what training reads
    assert np.isnan(trained.utility["accuracy"])  # its clients hold no test node to score


@pytest.mark.parametrize(("name", "config"), sorted(REFUSING.items()))
def test_targets_that_cannot_train_inductively_refuse(dataset, name, config):
    fed = federation(dataset)
    with pytest.raises(ConfigError, match="partition.membership: .* cannot train inductively"):
        TARGETS.get(name).fit(fed, config, [], 0)


def test_every_built_in_node_target_is_walked_or_refuses():
    node_level = {n for n, level in BUILT_IN["targets"].items() if level != "graph"}
    assert node_level == set(TINY) | set(REFUSING)


def test_an_inductive_recipe_trains_reference_models_inductively(dataset):
    """Shadow and reference models run the target's recipe on the adversary's records: under
    an inductive recipe the records a model does not train on never reach its training; under
    a transductive one they sit unlabelled in its clients' graphs (the control)."""
    from fgl_workbench.adversary.candidates import Candidates
    from fgl_workbench.attacks.membership.reference import ReferencePool
    from fgl_workbench.models import ModelConfig, ModelSpec
    from fgl_workbench.targets.training import TrainingRecipe

    ids = np.arange(0, 240, 2)
    records = Candidates("node", ids, dataset.labels[ids])
    inclusion = np.zeros((2, ids.size), dtype=bool)
    inclusion[0, ::3] = inclusion[1, 1::3] = True
    spec = ModelSpec(ModelConfig(), dataset.num_features, dataset.num_classes, "node")
    config = {"rounds": 2, "local_epochs": 1, "release": "last"}
    excluded = ids[~inclusion.any(axis=0)]  # no model trains on these
    for membership in ("inductive", "transductive"):
        recipe = TrainingRecipe("fedavg", config, 2, 40, inductive=membership == "inductive")
        pool = ReferencePool(seed=1, batched=False)  # every model through the target's fit
        with training_inputs() as seen:
            pool.models("t", records, inclusion, recipe, spec, dataset.data)
        assert (rows_seen(seen, dataset, excluded) > 0) == (membership == "transductive")


def test_an_inductive_recipe_is_not_trained_batched(dataset):
    from fgl_workbench.models import ModelConfig, ModelSpec
    from fgl_workbench.targets.batched import batchable
    from fgl_workbench.targets.training import TrainingRecipe

    spec = ModelSpec(ModelConfig(), dataset.num_features, dataset.num_classes, "node")
    config = {"rounds": 2, "local_epochs": 1, "release": "last"}
    for membership, batched in (("transductive", True), ("inductive", False)):
        part = federation(dataset, membership).partition
        recipe = TrainingRecipe("fedavg", config, 3, 40, inductive=membership == "inductive")
        assert (batchable(recipe, spec, dataset, [part, part]) is not None) == batched


def test_recipe_identity_changes_only_when_inductive():
    from fgl_workbench.targets.training import TrainingRecipe

    plain = TrainingRecipe("fedavg", {"rounds": 2}, 3, 40)
    assert "membership" not in plain.identity()
    inductive = dataclasses.replace(plain, inductive=True)
    assert "membership='inductive'" in inductive.identity()


def test_released_scores_are_the_models_answers_on_the_population_graph(dataset):
    """An inductive federation's test utility: the released model on the clients' test
    nodes, answered a hop beyond its layers, is its answer on the whole population graph."""
    from fgl_workbench.targets.training import score_released

    fed = federation(dataset)
    trained = TARGETS.get("centralized").fit(fed, TINY["centralized"], [], 0)
    test = non_members(fed)
    with torch.no_grad():
        logits = trained.global_model.eval()(dataset.data.x, dataset.data.edge_index)
    expected = float((logits[test].argmax(1).numpy() == dataset.labels[test]).mean())
    pooled = score_released(trained.query, fed, hops=3, pooled=True)
    per_client = score_released(trained.query, fed, hops=3)
    assert pooled["accuracy"] == pytest.approx(expected)
    assert per_client["accuracy"] == pytest.approx(expected)  # weighted by test nodes
    assert np.isfinite(pooled["macro_f1"]) and np.isfinite(per_client["macro_f1"])
