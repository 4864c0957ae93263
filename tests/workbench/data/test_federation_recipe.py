"""A federation's recipe: the cell's dataset, partition and seed as plain data, from which a
machine holding the dataset rebuilds any one client alone (a Flower SuperNode its own)."""

from fgl_workbench.data.recipe import FederationRecipe, client_digest

CSBM = {"num_nodes": 400, "num_classes": 4, "num_features": 16, "seed": 3}
RECIPE = FederationRecipe(
    dataset="csbm", dataset_params=CSBM, method="louvain", num_clients=3, seed=0
)


def test_the_recipe_rebuilds_each_client_alone_as_the_workbench_holds_it():
    federation = RECIPE.build()
    assert federation.recipe == RECIPE
    digests = [client_digest(c) for c in federation.clients]
    assert [client_digest(RECIPE.client(k)) for k in range(3)] == digests
    assert len(set(digests)) == 3
    other = RECIPE.model_copy(update={"seed": 1})
    assert client_digest(other.client(0)) != digests[0]


def test_a_recipe_travels_as_json():
    assert FederationRecipe.model_validate_json(RECIPE.model_dump_json()) == RECIPE
