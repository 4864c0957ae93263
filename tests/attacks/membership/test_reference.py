import dataclasses

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import background_knowledge, querier_view, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import membership_challenge
from fgl_workbench.attacks.membership import reference
from fgl_workbench.attacks.membership.reference import (
    ReferenceConfig,
    ReferencePool,
    federation_of,
    inclusion_matrix,
    induced_subgraph,
    reference_outputs,
)
from fgl_workbench.attacks.membership.shadow import ShadowAttack, ShadowConfig
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.errors import ConfigError
from fgl_workbench.query import NodeQueryAPI, Personalised
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.batched import schedule_of


@pytest.fixture(scope="module")
def cell(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0, aux_fraction=0.2))
    trained = TARGETS.get("fedavg").fit(fed, {"rounds": 3, "local_epochs": 2}, [], seed=0)
    return fed, trained


def cell_input(cell, pool) -> AttackInput:
    fed, trained = cell
    ch = membership_challenge(fed, seed=0)
    return AttackInput(
        querier_view(trained, fed), background_knowledge(fed, trained), ch.candidates, pool
    )


def test_every_record_is_in_the_same_number_of_models():
    inc = inclusion_matrix(10, 500, 0.3, seed=0)
    assert (inc.sum(0) == 3).all()
    assert abs(inc.sum(1).mean() - 150) < 1e-9
    assert (inclusion_matrix(4, 50, 0.01, seed=0).sum(0) == 1).all()  # at least one IN model
    with pytest.raises(ConfigError, match="num_references"):
        inclusion_matrix(1, 50, 0.3, seed=0)


def test_graph_references_train_as_before_their_clients_held_test_graphs(small_graphs):
    """Holding the non-members as test graphs changes what a personalised reference answers
    them with, not what any reference trains: the released weights are the ones a client
    holding only its members trains."""
    from fgl_workbench.data.partition import ClientPart, Partition

    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 2, 0))
    trained = TARGETS.get("fedavg").fit(fed, {"rounds": 2, "local_epochs": 1}, [], seed=0)
    shards = [np.arange(0, 40), np.arange(40, 80)]
    members = np.arange(small_graphs.num_items) % 3 == 0
    holding = federation_of("graph", shards, members)
    assert all(c.test.size for c in holding.clients)
    members_only = Partition(
        "graph",
        "adversary",
        tuple(
            ClientPart(c.client_id, c.train, c.train, c.val, c.test[:0]) for c in holding.clients
        ),
        holding.aux_ids,
    )
    a, b = (
        reference.train_job(reference.TrainJob(trained.recipe, p, 5), small_graphs)
        for p in (holding, members_only)
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_reference_federation_mirrors_the_target():
    shards = [np.array([0, 1, 2, 3]), np.array([4, 5, 6]), np.array([7, 8])]
    members = np.zeros(9, bool)
    members[[1, 3, 5]] = True
    node = federation_of("node", shards, members)
    assert [c.train.tolist() for c in node.clients] == [[1, 3], [5]]  # memberless client dropped
    assert node.clients[0].ids.tolist() == [0, 1, 2, 3]  # non-members stay, unlabelled
    graph = federation_of("graph", shards, members)
    assert [c.train.tolist() for c in graph.clients] == [[1, 3], [5]]
    # a graph client holds its non-members as test graphs, as the target's clients do
    assert graph.clients[0].ids.tolist() == [0, 1, 2, 3]
    assert [c.test.tolist() for c in graph.clients] == [[0, 2], [4, 6]]


def test_pool_trains_once_for_attacks_that_share_models(cell):
    pool = ReferencePool(jobs=1, seed=3)
    inp = cell_input(cell, pool)
    lira, rmia = ATTACKS.get("mia-lira"), ATTACKS.get("mia-rmia")
    lira.run(inp, lira.Config(num_references=4), seed=0)
    lira.run(inp, lira.Config(num_references=4, mode="offline"), seed=1)
    rmia.run(inp, rmia.Config(num_references=4, hops=1), seed=2)
    assert pool.trained == 4
    rmia.run(inp, rmia.Config(num_references=6), seed=2)
    assert pool.trained == 10


def test_worker_processes_give_the_same_models(cell, monkeypatch):
    monkeypatch.setattr(reference, "WORKER_STARTUP_SECONDS", 0.0)  # use workers for tiny jobs
    outs = []
    for jobs in (1, 2):  # one at a time: batched training never needs workers
        with ReferencePool(jobs, seed=3, batched=False) as pool:
            outs.append(
                reference_outputs(cell_input(cell, pool), ReferenceConfig(num_references=4))
            )
            assert (pool._executor is not None) == (jobs == 2)
    np.testing.assert_array_equal(outs[0].inclusion, outs[1].inclusion)
    torch.testing.assert_close(outs[0].logits, outs[1].logits, rtol=0, atol=0)


def test_a_cpu_worker_runs_without_a_default_device_mode(small_csbm):
    """A reference-model worker on the CPU installs no default-device mode: it would
    intercept every torch call of its fits (the cells skip it on the CPU too)."""
    modes = torch._C._len_torch_function_stack()
    try:
        reference._init_worker(small_csbm, torch.device("cpu"))
        assert torch._C._len_torch_function_stack() == modes
    finally:
        torch.set_default_device(None)
        reference._WORKER_DATASET = None


def test_short_jobs_stay_in_process(cell):
    """Starting a worker costs seconds; jobs shorter than that are not worth sending."""
    with ReferencePool(jobs=2, seed=3, batched=False) as pool:
        reference_outputs(cell_input(cell, pool), ReferenceConfig(num_references=4))
        assert pool._executor is None and pool.trained == 4


def test_bad_job_count_is_a_clear_error():
    with pytest.raises(ConfigError, match="jobs"):
        ReferencePool(jobs=0)


def test_subset_keeps_graphs_aligned_with_ids(small_graphs):
    from fgl_workbench.adversary.candidates import Candidates
    from fgl_workbench.attacks.membership.reference import subset

    ids = np.array([5, 2, 9])
    recs = Candidates(
        "graph", ids, small_graphs.labels[ids], tuple(small_graphs.graphs[i] for i in ids)
    )
    for keep in (np.array([2, 0]), np.array([True, False, True])):
        sub = subset(recs, keep)
        assert [g is small_graphs.graphs[i] for g, i in zip(sub.graphs, sub.ids, strict=True)] == [
            True,
            True,
        ]


def test_reference_fraction_sets_the_training_share(cell):
    """Default: as many records as the target trained on; 0.5: Carlini et al.'s halves."""
    fed, trained = cell
    inp = cell_input(cell, ReferencePool(seed=3))
    halves = reference_outputs(inp, ReferenceConfig(num_references=4, reference_fraction=0.5))
    assert (halves.inclusion.sum(0) == 2).all()
    default = reference_outputs(inp, ReferenceConfig(num_references=10))
    share = trained.recipe.train_size / default.records.ids.size
    assert (default.inclusion.sum(0) == round(10 * share)).all()


def test_centralized_models_train_the_released_architecture_on_their_members(cell):
    fed, trained = cell
    know = background_knowledge(fed, trained)
    recipe = reference.adversary_recipe(know, "centralized")
    assert recipe.target == "centralized" and recipe.num_clients == 1
    assert recipe.train_size == know.recipe.train_size  # as many records as the target's
    assert reference.adversary_recipe(know, "target") is know.recipe
    inp = cell_input(cell, ReferencePool(jobs=1, seed=3))
    aux = know.aux
    inclusion = np.zeros((1, aux.ids.size), bool)
    inclusion[0, : aux.ids.size // 2] = True
    (model,) = reference.trained_models(inp, "shadow", aux, inclusion, "centralized")
    assert type(model) is type(trained.global_model)
    logits = reference.model_api(model, know).logits(aux.ids)
    members, others = inclusion[0], ~inclusion[0]
    correct = logits.argmax(1).numpy() == aux.labels
    assert correct[members].mean() > correct[others].mean()  # it fit its members


def test_models_on_other_features_are_trained_anew(cell):
    """An adaptive attacker's models train on its own encoding: the pool must not hand it
    the models it trained on the raw features (same records, same inclusion)."""
    fed, trained = cell
    pool = ReferencePool(jobs=1, seed=3)
    inp = cell_input(cell, pool)
    know = inp.knowledge
    inclusion = np.zeros((1, know.aux.ids.size), bool)
    inclusion[0, ::2] = True
    (raw,) = reference.trained_models(inp, "shadow", know.aux, inclusion, "centralized")
    graph = know.graph.clone()
    graph.x = -graph.x
    moved = AttackInput(inp.view, dataclasses.replace(know, graph=graph), inp.candidates, pool)
    (other,) = reference.trained_models(moved, "shadow", know.aux, inclusion, "centralized")
    (again,) = reference.trained_models(inp, "shadow", know.aux, inclusion, "centralized")
    assert pool.trained == 2
    assert not torch.equal(
        raw.state_dict()["convs.0.lin.weight"], other.state_dict()["convs.0.lin.weight"]
    )
    for a, b in zip(raw.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.fixture(scope="module")
def fine_tuned_cell(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0, aux_fraction=0.2))
    config = {
        "rounds": 2,
        "local_epochs": 2,
        "fine_tune": {"lr": 0.01, "epochs": 20, "eval_every": 5, "patience": 10},
    }
    return fed, TARGETS.get("fedavg").fit(fed, config, [], seed=0)


def personalised_reference(cell) -> tuple[AttackInput, Personalised, np.ndarray]:
    """One reference of a two-client personalised target, trained on every other record of
    the pool: the attack input, the reference and its inclusion row."""
    inp = cell_input(cell, ReferencePool(jobs=1, seed=3))
    aux = inp.knowledge.aux
    inclusion = np.zeros((1, aux.ids.size), bool)
    inclusion[0, ::2] = True
    (ref,) = reference.trained_models(inp, "references", aux, inclusion)
    assert isinstance(ref, Personalised) and sorted(ref.models) == [0, 1]
    return inp, ref, inclusion


def test_references_of_a_personalised_target_answer_each_record_by_its_owners_model(
    fine_tuned_cell,
):
    """FedAvg with fine-tuning deploys a model per client: a reference trained with its recipe
    is the same deployment (each client's fine-tuned model, each record answered by the
    reference client holding it), not the global model before fine-tuning."""
    fed, trained = fine_tuned_cell
    assert schedule_of(trained.recipe) is None  # the batched loop does not fine-tune
    inp, ref, inclusion = personalised_reference(fine_tuned_cell)
    know, aux = inp.knowledge, inp.knowledge.aux
    held = ref.owner >= 0
    assert sorted(np.flatnonzero(held)) == sorted(aux.ids)  # the records, and nothing else
    routed = reference.model_api(ref, know).logits(aux.ids)
    for k, model in ref.models.items():
        mine = ref.owner[aux.ids] == k
        own = NodeQueryAPI(model, know.graph).logits(aux.ids[mine])
        assert torch.equal(routed[torch.as_tensor(mine)], own)
    # the clients' models are fine-tuned apart: they answer differently
    a, b = (NodeQueryAPI(m, know.graph).logits(aux.ids) for m in ref.models.values())
    assert not torch.allclose(a, b)
    # a server observes uploads, not deployments: its references are the global models
    (glob,) = reference.trained_models(
        dataclasses.replace(inp, view=server_view(trained, fed)), "references", aux, inclusion
    )
    assert not isinstance(glob, Personalised)


def test_a_personalised_reference_routes_each_record_to_the_client_that_held_it(
    fine_tuned_cell,
):
    """The owner table against a partition written by hand: records (sorted ids) 0–9 in one
    shard, the rest in another; whatever the reference fit numbers internally, record i is
    answered by the model of the client holding it."""
    fed, trained = fine_tuned_cell
    know = background_knowledge(fed, trained)
    records = reference.subset(know.aux, np.argsort(know.aux.ids))
    n = records.ids.size
    dataset = reference.adversary_dataset(records, know.graph, know.spec.num_classes)
    shards = [np.arange(0, 10), np.arange(10, n)]
    members = np.zeros(n, bool)
    members[[0, 2, 4, 10, 12, 14, 16]] = True
    job = reference.TrainJob(know.recipe, federation_of("node", shards, members), 0)
    ref = reference.answering_model(
        reference.train_job(job, dataset), know.spec, records, know.graph, deployed=True
    )
    assert (ref.owner[records.ids[:10]] == 0).all() and (ref.owner[records.ids[10:]] == 1).all()
    assert (np.delete(ref.owner, records.ids) == -1).all()


def test_reference_and_shadow_attacks_run_against_a_personalised_target(fine_tuned_cell):
    inp = cell_input(fine_tuned_cell, ReferencePool(jobs=1, seed=3))
    lira, shadow = ATTACKS.get("mia-lira"), ATTACKS.get("mia-shadow")
    for out in (
        lira.run(inp, lira.Config(num_references=2), seed=0),
        shadow.run(inp, shadow.Config(num_shadows=2, setting="disjoint"), seed=0),
    ):
        assert np.isfinite(out.scores).all() and out.scores.shape == inp.candidates.ids.shape


def test_a_personalised_shadow_answers_on_the_induced_graph_by_each_records_owner(
    fine_tuned_cell,
):
    """The disjoint (TSTS) setting queries a shadow on the subgraph its records induce: a
    personalised shadow answers record i of that subgraph with the model of its owner."""
    fed, trained = fine_tuned_cell
    inp = cell_input(fine_tuned_cell, ReferencePool(jobs=1, seed=3))
    aux = inp.knowledge.aux
    inclusion = np.zeros((1, aux.ids.size), bool)
    inclusion[0, ::2] = True
    (shadow,) = reference.trained_models(inp, "shadow", aux, inclusion)
    part = reference.subset(aux, np.flatnonzero(inclusion[0]))
    config = ShadowConfig(setting="disjoint", hops=1)
    got = ShadowAttack._shadow_logits(inp, shadow, part, config, member=True)
    own = induced_subgraph(inp.knowledge.graph, part.ids)
    for k, model in shadow.models.items():
        mine = shadow.owner[part.ids] == k
        expected = NodeQueryAPI(model, own).logits(np.flatnonzero(mine), 1)
        assert mine.any() and torch.equal(got[torch.as_tensor(mine)], expected)


@pytest.fixture(scope="module")
def local_modules_cell(small_graphs):
    """GCFL's FedAvg: each client keeps its input and readout layers, and deploys its own."""
    fed = build_federation(
        small_graphs, make_partition(small_graphs, "iid", 2, 0, aux_fraction=0.3)
    )
    config = {"rounds": 2, "local_epochs": 2, "keep_local": ["project", "head"]}
    return fed, TARGETS.get("fedavg").fit(fed, config, [], seed=0)


def test_references_of_a_graph_level_personalised_target_route_each_graph_to_its_owner(
    local_modules_cell,
):
    from fgl_workbench.query import GraphOwnerRoutedQueryAPI, GraphQueryAPI

    fed, trained = local_modules_cell
    assert schedule_of(trained.recipe) is None
    inp, ref, _ = personalised_reference(local_modules_cell)
    know, aux = inp.knowledge, inp.knowledge.aux
    assert sorted(np.flatnonzero(ref.owner >= 0)) == sorted(aux.ids)
    api = reference.model_api(ref, know)
    assert isinstance(api, GraphOwnerRoutedQueryAPI)
    routed = reference.query(api, aux, 0)
    for k, model in ref.models.items():
        mine = ref.owner[aux.ids] == k
        own = GraphQueryAPI(model).logits([g for g, m in zip(aux.graphs, mine, strict=True) if m])
        assert torch.equal(routed[torch.as_tensor(mine)], own)


def test_membership_attacks_run_against_a_graph_level_personalised_target(local_modules_cell):
    from fgl_workbench.errors import NotApplicableError

    fed, trained = local_modules_cell
    inp = cell_input(local_modules_cell, ReferencePool(jobs=1, seed=3))
    lira, shadow = ATTACKS.get("mia-lira"), ATTACKS.get("mia-shadow")
    threshold = ATTACKS.get("mia-threshold")
    for out in (
        threshold.run(inp, threshold.Config(), seed=0),
        lira.run(inp, lira.Config(num_references=2), seed=0),
        shadow.run(inp, shadow.Config(num_shadows=2, setting="disjoint"), seed=0),
    ):
        assert np.isfinite(out.scores).all() and out.scores.shape == inp.candidates.ids.shape
    # the server received the convolutions only: no model of its own answers
    on_server = dataclasses.replace(inp, view=server_view(trained, fed))
    with pytest.raises(NotApplicableError, match="keeps to itself \\(head, project\\)"):
        threshold.run(on_server, threshold.Config(adversary="server"), seed=0)
