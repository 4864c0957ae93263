"""Reference models trained together equal the same models trained one at a time: same
seeds, same records, same recipe, within float tolerance; recipes the batched loop cannot
reproduce are left to the one-at-a-time path."""

import numpy as np
import pytest
import torch

from fgl_workbench.attacks.membership.reference import (
    ReferencePool,
    TrainJob,
    federation_of,
    inclusion_matrix,
    train_job,
)
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.defenses import applied
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.seeding import derive_seed
from fgl_workbench.targets.batched import train_batched
from fgl_workbench.targets.training import TrainingRecipe

K = 3


@pytest.fixture(scope="module")
def dataset():
    return load_dataset("csbm", {"num_nodes": 240, "num_features": 40})


def jobs_for(dataset, recipe: TrainingRecipe) -> list[TrainJob]:
    inclusion = inclusion_matrix(K, dataset.num_items, 0.5, seed=0)
    shards = ReferencePool._shards(dataset, recipe.num_clients, seed=1)
    rows = enumerate(inclusion)
    return [TrainJob(recipe, federation_of("node", shards, r), derive_seed(9, i)) for i, r in rows]


def recipe(target: str, arch: str, **config) -> TrainingRecipe:
    model = {"arch": arch, "hidden": 16}
    if target == "fedavg":
        base = {"model": model, "rounds": 3, "local_epochs": 2, "release": "last"}
        return TrainingRecipe("fedavg", base | config, 4, 60)
    return TrainingRecipe("centralized", {"model": model, "epochs": 8, "release": "last"}, 1, 60)


@pytest.mark.parametrize(
    ("target", "arch", "config"),
    [
        ("fedavg", "gcn", {}),
        ("fedavg", "sage", {}),
        ("fedavg", "mlp", {"optimizer": "sgd", "lr": 0.1}),
        ("fedavg", "gcn", {"persistent_optimizer": False}),
        ("centralized", "gcn", {}),
    ],
)
def test_batched_models_equal_one_at_a_time(dataset, target, arch, config):
    r = recipe(target, arch, **config)
    jobs = jobs_for(dataset, r)
    spec = ModelSpec(ModelConfig(arch=arch, hidden=16), dataset.num_features, 4, "node")
    together = train_batched(r, spec, dataset, [j.partition for j in jobs], [j.seed for j in jobs])
    assert together is not None and len(together) == K
    alone = [train_job(j, dataset) for j in jobs]
    for a, b in zip(together, alone, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.allclose(a[key], b[key], atol=1e-5, rtol=1e-4), key
    # the models do differ from each other: the check compares like with like
    assert not torch.allclose(alone[0][key], alone[1][key], atol=1e-3)


def test_sparse_bag_of_words_features_train_the_same(dataset):
    """Cora-like 0/1 features go through the CSR product and its transposed backward."""
    x = torch.rand(dataset.data.x.shape, generator=torch.Generator().manual_seed(0)) < 0.05
    sparse = type(dataset)(dataset.name, dataset.data.clone(), dataset.num_classes)
    sparse.data.x = x.float()
    r = recipe("fedavg", "gcn")
    jobs = jobs_for(sparse, r)
    spec = ModelSpec(ModelConfig(arch="gcn", hidden=16), sparse.num_features, 4, "node")
    together = train_batched(r, spec, sparse, [j.partition for j in jobs], [j.seed for j in jobs])
    alone = [train_job(j, sparse) for j in jobs]
    for a, b in zip(together, alone, strict=True):
        assert all(torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4) for k in a)


@pytest.mark.parametrize(
    "change",
    [
        {"config": {"client_fraction": 0.5}},
        {"config": {"eval_dropout": True}},
        {"arch": "gat"},
        {"defenses": True},
        {"layers": 1},  # one layer drops out the input features: not drawn by the loop
    ],
)
def test_recipes_it_cannot_reproduce_are_left_alone(dataset, change):
    r = recipe("fedavg", change.get("arch", "gcn"), **change.get("config", {}))
    if change.get("defenses"):
        dp = applied("gaussian-upload", {"clip": 1.0, "noise_multiplier": 1.0})
        r = TrainingRecipe(r.target, r.config, r.num_clients, r.train_size, (dp,))
    jobs = jobs_for(dataset, r)
    model = ModelConfig(arch=change.get("arch", "gcn"), hidden=16, layers=change.get("layers"))
    spec = ModelSpec(model, 40, 4, "node")
    assert (
        train_batched(r, spec, dataset, [j.partition for j in jobs], [j.seed for j in jobs]) is None
    )


def test_the_pool_trains_batched_and_its_models_match(dataset):
    r = recipe("fedavg", "gcn")
    spec = ModelSpec(ModelConfig(arch="gcn", hidden=16), dataset.num_features, 4, "node")
    from fgl_workbench.adversary.candidates import Candidates

    ids = np.arange(dataset.num_items)
    records = Candidates("node", ids, dataset.labels)
    inclusion = inclusion_matrix(K, ids.size, 0.5, seed=0)
    models = []
    for batched in (True, False):
        with ReferencePool(1, 0, batched=batched) as pool:
            models.append(pool.models("refs", records, inclusion, r, spec, dataset.data))
            assert pool.trained == K
    for a, b in zip(*models, strict=True):
        for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.allclose(p, q, atol=1e-5, rtol=1e-4), name


def test_a_gap_recipe_is_left_to_the_one_at_a_time_path(dataset):
    """GAP's released spec has no ``ModelConfig``: the check must not read one (LiRA against
    a GAP target crashed here)."""
    from fgl_workbench.targets.batched import batchable
    from fgl_workbench.targets.gap import GAPSpec

    r = TrainingRecipe("gap", {"encoder_rounds": 2, "rounds": 3}, 4, 60)
    spec = GAPSpec(40, 4, 16, 64, 2, 0.0)
    jobs = jobs_for(dataset, r)
    assert batchable(r, spec, dataset, [j.partition for j in jobs]) is None
