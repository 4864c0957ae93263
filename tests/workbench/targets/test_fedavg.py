import numpy as np
import pytest
import torch
from torch_geometric.nn.conv import gcn_conv

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import AppliedDefense
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets import TARGETS

FEDAVG = TARGETS.get("fedavg")


def assert_same_client_models(a, b) -> None:
    """Every client's model holds bit-identical weights in both runs."""
    assert sorted(a.client_models) == sorted(b.client_models)
    for k, model in a.client_models.items():
        for n, v in model.state_dict().items():
            assert torch.equal(b.client_models[k].state_dict()[n], v), (k, n)


def test_cora_louvain_10_clients_reaches_the_paper_regime(cora):
    """FedTAD's Table 2 reports 73.6 for FedAvg on Cora, Louvain, 10 clients, 20/40/40.
    We measure 76-79 (docs/reproduction.md); the floor sits well below."""
    fed = build_federation(cora, make_partition(cora, "louvain", 10, seed=0))
    trained = FEDAVG.fit(fed, {"rounds": 100}, [], seed=0)
    assert trained.utility["accuracy"] > 0.65
    assert 0 <= trained.utility["best_round"] < 100


def test_proteins_three_clients_beats_majority_class(proteins):
    fed = build_federation(proteins, make_partition(proteins, "iid", 3, seed=0))
    trained = FEDAVG.fit(fed, {"rounds": 30, "local_epochs": 1, "lr": 0.001}, [], seed=0)
    majority = np.bincount(proteins.labels).max() / proteins.num_items  # 0.596
    assert trained.utility["accuracy"] > majority + 0.03


def test_same_seed_same_numbers(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    a = FEDAVG.fit(fed, {"rounds": 5}, [], seed=7)
    b = FEDAVG.fit(fed, {"rounds": 5}, [], seed=7)
    c = FEDAVG.fit(fed, {"rounds": 5}, [], seed=8)
    assert a.utility == b.utility
    for k, v in a.global_model.state_dict().items():
        assert torch.equal(v, b.global_model.state_dict()[k])
    assert any(
        not torch.equal(v, c.global_model.state_dict()[k])
        for k, v in a.global_model.state_dict().items()
    )


@pytest.mark.parametrize("arch", ["gcn", "sage", "gat", "mlp"])
def test_node_backbones_learn(small_csbm, arch):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, seed=0))
    trained = FEDAVG.fit(fed, {"rounds": 15, "model": {"arch": arch, "hidden": 32}}, [], 0)
    assert trained.utility["accuracy"] > 0.5  # 4 balanced classes: chance is 0.25


def test_graph_level_fedavg_on_synthetic_graphs(small_graphs):
    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 3, seed=0))
    trained = FEDAVG.fit(fed, {"rounds": 10, "lr": 0.005}, [], 0)
    assert trained.level == "graph"
    assert trained.utility["accuracy"] > 0.6


def test_a_client_without_training_graphs_sends_back_the_model_it_received(small_graphs):
    """120 graphs over 60 clients: some hold no training graph. They take part, train
    nothing and weigh 0 (it crashed the data loader), with and without DP-SGD."""
    from fgl_workbench.defenses import applied
    from fgl_workbench.transcript import SERVER

    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 60, seed=0))
    idle = [k for k, c in enumerate(fed.clients) if len(c.train) == 0]
    assert idle
    cfg = {"rounds": 1, "local_epochs": 1, "model": {"arch": "gin", "hidden": 8, "layers": 1}}
    trained = FEDAVG.fit(fed, {**cfg, "keep_payloads": "all"}, [], 0)
    sent = next(m.payload for m in trained.transcript.messages if m.sender == SERVER)
    k = f"client:{idle[0]}"
    (upload,) = [m.payload for m in trained.transcript.messages if m.sender == k]
    assert all(torch.equal(upload[name], sent[name]) for name in sent)
    assert np.isfinite(trained.utility["accuracy"])
    dp = applied("dp-sgd", {"noise_multiplier": 1.0, "sample_rate": 0.5})
    assert np.isfinite(FEDAVG.fit(fed, cfg, [dp], 0).utility["accuracy"])


def test_a_round_without_a_training_record_keeps_the_model_under_secure_aggregation(small_csbm):
    """Every client's training mask empty: each weighs 0, so the decrypted total weight is
    0 plus CKKS's error, and dividing by it gave garbage; the round keeps the model, as the
    plain weighted mean does."""
    from fgl_workbench.defenses import applied

    fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    for c in fed.clients:
        c.data.train_mask[:] = False
    cfg = {"rounds": 2, "local_epochs": 1, "release": "last"}
    secure = FEDAVG.fit(fed, cfg, [applied("secure-aggregation", {})], 0).global_model
    plain = FEDAVG.fit(fed, cfg, [], 0).global_model.state_dict()
    for name, value in secure.state_dict().items():
        assert torch.allclose(value, plain[name], atol=1e-6)


def test_selection_is_on_validation_not_test(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    trained = FEDAVG.fit(fed, {"rounds": 8}, [], 0)
    vals = [h["val_accuracy"] for h in trained.history]
    assert trained.utility["best_round"] == int(np.argmax(vals))
    assert trained.utility["val_accuracy"] == max(vals)


def test_validation_is_scored_only_where_it_is_read(small_csbm, monkeypatch):
    """Released ``last``, only the last round's validation is read (the reported
    val_accuracy); on clients without validation nodes (reference models) none is; best_val
    reads every round. The released model and every figure are those of validating each
    round."""
    import dataclasses

    from fgl_workbench.targets.fedavg.node import NodeFedAvg

    class EveryRound(NodeFedAvg):
        @staticmethod
        def validation_rounds(cfg, rule, clients):
            return range(cfg.rounds)

    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, seed=0))
    bare = []
    for c in fed.clients:
        data = c.data.clone()
        data.val_mask = torch.zeros_like(data.val_mask)
        bare.append(dataclasses.replace(c, data=data))
    unvalidated = dataclasses.replace(fed, clients=tuple(bare))
    splits: list[str] = []
    score = NodeFedAvg.score

    def counted(model, clients, split, dropout=False):
        splits.append(split)
        return score(model, clients, split, dropout)

    last = {"rounds": 4, "release": "last"}
    before = EveryRound().fit(fed, last, [], 0)
    monkeypatch.setattr(NodeFedAvg, "score", staticmethod(counted))
    got = FEDAVG.fit(fed, last, [], 0)
    assert splits == ["val", "test"]
    assert got.utility == before.utility and got.utility["val_accuracy"] > 0
    for k, v in before.global_model.state_dict().items():
        assert torch.equal(v, got.global_model.state_dict()[k])
    splits.clear()
    FEDAVG.fit(unvalidated, last, [], 0)
    assert splits == ["test"]
    splits.clear()
    FEDAVG.fit(fed, {"rounds": 4}, [], 0)
    assert splits == ["val"] * 4 + ["test"]


def test_wrong_architecture_for_level_is_a_config_error(small_graphs):
    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 2, seed=0))
    with pytest.raises(ConfigError, match="model.arch: 'gcn'.*valid choices: gin"):
        FEDAVG.fit(fed, {"rounds": 1, "model": {"arch": "gcn"}}, [], 0)


def test_utility_scores_weight_clients_by_size_and_pool_auc():
    from fgl_workbench.targets.training import utility_scores

    big = (np.array([0, 0, 1, 1]), torch.tensor([[2.0, 0], [2, 0], [0, 2], [2, 0]]))
    small = (np.array([1]), torch.tensor([[0.0, 3]]))
    empty = (np.zeros(0, dtype=np.int64), torch.zeros(0, 2))
    out = utility_scores([big, small, empty])
    assert out["accuracy"] == pytest.approx(0.75 * 4 / 5 + 1.0 / 5)
    assert out["auc"] == pytest.approx(5 / 6)  # pooled: 3 positives, 2 negatives
    assert utility_scores([empty])["accuracy"] != utility_scores([empty])["accuracy"]  # NaN


def test_eval_dropout_switch_keeps_dropout_on_when_scoring(small_csbm):
    from fgl_workbench.targets.training import node_logits

    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, seed=0))
    trained = FEDAVG.fit(fed, {"rounds": 2}, [], 0)
    data = fed.clients[0].data
    model = trained.global_model
    assert torch.equal(node_logits(model, data), node_logits(model, data))
    assert not torch.equal(node_logits(model, data, True), node_logits(model, data, True))
    compat = FEDAVG.fit(fed, {"rounds": 2, "eval_dropout": True}, [], 0)
    assert compat.utility != trained.utility


def test_defenses_are_refused_not_ignored(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, seed=0))
    with pytest.raises(ConfigError, match="cannot apply 'ib'"):
        FEDAVG.fit(fed, {"rounds": 1}, [AppliedDefense("ib", "transform", None)], 0)


def test_recipe_retrains_the_released_model(small_csbm):
    """The recipe an adversary gets stops where the released model stopped: run on the same
    federation with the same seed, it rebuilds the released weights exactly."""
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, seed=0))
    trained = TARGETS.get("fedavg").fit(fed, {"rounds": 12, "local_epochs": 2}, [], seed=4)
    assert trained.recipe.config["rounds"] == trained.utility["best_round"] + 1
    # an option left off leaves the identity that seeds reference models as it was before it
    assert "fine_tune" not in trained.recipe.identity()
    again = TARGETS.get(trained.recipe.target).fit(fed, trained.recipe.config, [], seed=4)
    for k, v in trained.global_model.state_dict().items():
        torch.testing.assert_close(again.global_model.state_dict()[k], v, rtol=0, atol=0)
    assert trained.recipe.train_size == sum(int(c.data.train_mask.sum()) for c in fed.clients)


def test_recipe_identity_is_unchanged_without_defenses():
    from fgl_workbench.targets.training import TrainingRecipe

    plain = TrainingRecipe("fedavg", {"rounds": 3}, 2, 10)
    assert (
        plain.identity()
        == "TrainingRecipe(target='fedavg', config={'rounds': 3}, num_clients=2, train_size=10)"
    )
    defended = TrainingRecipe("fedavg", {"rounds": 3}, 2, 10, ("dp",))
    assert defended.identity().endswith("train_size=10, defenses=('dp',))")


def test_dp_releases_the_last_round_unless_asked(small_csbm):
    """Choosing the best-validation round uses validation records outside the accountant: under
    DP the last round is released, and asking for selection puts a caveat on every ε."""
    from fgl_workbench.accountants import epsilons_by_adversary
    from fgl_workbench.defenses import applied

    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, 0))
    dp = applied("dp-fedavg", {"noise_multiplier": 5.0})
    cfg = {"rounds": 4, "local_epochs": 1}
    last = TARGETS.get("fedavg").fit(fed, cfg, [dp], seed=0)
    assert last.utility["best_round"] == 3
    assert all("validation" not in r.note for r in epsilons_by_adversary(last.ledger, 1e-5))
    chosen = TARGETS.get("fedavg").fit(fed, {**cfg, "release": "best_val"}, [dp], seed=0)
    rows = epsilons_by_adversary(chosen.ledger, 1e-5)
    assert all("excludes the validation records" in r.note for r in rows if r.epsilon < np.inf)


FINE_TUNE = {"lr": 0.01, "epochs": 60, "eval_every": 5, "patience": 3}


@pytest.fixture(scope="module")
def fine_tuned_run(small_csbm):
    """One round, then each client fine-tunes: O-pFGL's "FedAvg + FT" baseline."""
    fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    cfg = {"rounds": 1, "local_epochs": 5, "fine_tune": FINE_TUNE}
    return fed, FEDAVG.fit(fed, cfg, [], seed=0)


def test_fine_tuning_deploys_each_clients_own_model_no_worse_on_its_validation(fine_tuned_run):
    """A client keeps the global weights unless fine-tuning beats them on its validation
    nodes; on these label-skewed parts most clients gain, and so does test accuracy."""
    from fgl_workbench.targets.fine_tuning import val_accuracy

    fed, trained = fine_tuned_run
    models, start = trained.client_models, trained.global_model.state_dict()
    assert sorted(models) == [0, 1, 2]
    gained = 0
    for k, c in enumerate(fed.clients):
        before, after = val_accuracy(trained.global_model, c.data), val_accuracy(models[k], c.data)
        assert after >= before
        same = all(torch.equal(v, start[n]) for n, v in models[k].state_dict().items())
        assert same == (after == before), f"client {k}"
        gained += after > before
    assert gained >= 2
    assert trained.utility["accuracy"] > trained.utility["global_accuracy"] + 0.1
    assert {"global_macro_f1_all", "global_auc"} <= set(trained.utility)
    assert trained.served is None  # the owner-routed query is the deployment


def test_fine_tuned_deployments_answer_for_their_own_clients_nodes(fine_tuned_run):
    from fgl_workbench.query import NodeQueryAPI

    fed, trained = fine_tuned_run
    owner = fed.partition.owner(fed.dataset.num_items)
    for k in range(3):
        ids = np.flatnonzero(owner == k)[:20]
        own = NodeQueryAPI(trained.client_models[k], fed.dataset.data).logits(ids, 1)
        torch.testing.assert_close(trained.query.logits(ids, 1), own)


def test_fine_tuning_recipe_retrains_the_personalised_models(fine_tuned_run):
    fed, trained = fine_tuned_run
    assert_same_client_models(trained, FEDAVG.fit(fed, trained.recipe.config, [], seed=0))


def test_fine_tuning_is_refused_where_the_deployment_would_escape_its_defense(
    small_csbm, small_graphs
):
    from fgl_workbench.defenses import applied

    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, seed=0))
    cfg = {"rounds": 1, "fine_tune": FINE_TUNE}
    dp = applied("dp-fedavg", {"noise_multiplier": 5.0})
    with pytest.raises(ConfigError, match="fine_tune: .*outside what dp-fedavg covers"):
        FEDAVG.fit(fed, cfg, [dp], 0)
    with pytest.raises(ConfigError, match="fine_tune"):
        FEDAVG.planned_ledger(fed, cfg, [dp])
    graphs = build_federation(small_graphs, make_partition(small_graphs, "iid", 2, seed=0))
    with pytest.raises(ConfigError, match="fine_tune: node level only"):
        FEDAVG.fit(graphs, cfg, [], 0)
    # local modules: graph level, beside no defense, naming modules of the model
    local = {"rounds": 1, "keep_local": ["project", "head"]}
    with pytest.raises(ConfigError, match="keep_local: graph level only"):
        FEDAVG.fit(fed, local, [], 0)
    sa = applied("secure-aggregation", {})
    with pytest.raises(ConfigError, match="keep_local: .*outside what secure-aggregation covers"):
        FEDAVG.planned_ledger(graphs, local, [sa])
    with pytest.raises(ConfigError, match="keep_local: readout is not a module of the model"):
        FEDAVG.fit(graphs, {"rounds": 1, "keep_local": ["readout"]}, [], 0)
    with pytest.raises(ConfigError, match="every module is kept local"):
        FEDAVG.fit(graphs, {"rounds": 1, "keep_local": ["project", "convs", "head"]}, [], 0)
    # DP-SGD trains the kept modules with the rest, per record: it stays
    dp_sgd = applied("dp-sgd", {"noise_multiplier": 1.0, "clip": 1.0, "sample_rate": 0.2})
    assert FEDAVG.fit(graphs, local, [dp_sgd], 0).ledger.events
    # the clients' models before DP-FedAvg's noise are not the defended target's figures
    with pytest.raises(ConfigError, match="score_local_models: .*outside what dp-fedavg"):
        FEDAVG.fit(fed, {"rounds": 1, "score_local_models": True}, [dp], 0)


@pytest.mark.parametrize("level", ["node", "graph"])
def test_local_models_are_scored_as_openfgl_does_and_change_nothing_released(
    small_csbm, small_graphs, level
):
    """``score_local_models``: each round the clients' locally trained models (before they
    download the new average) are scored on their own validation data, and the best round's
    on their own test data is reported as local_*; the released model, its scores and the
    recipe are those of the run without it."""
    from fgl_workbench.targets.training import score_graph_personalised, score_personalised

    data = small_csbm if level == "node" else small_graphs
    fed = build_federation(
        data, make_partition(data, "louvain" if level == "node" else "iid", 3, 0)
    )
    plain = FEDAVG.fit(fed, {"rounds": 6}, [], seed=3)
    scored = FEDAVG.fit(fed, {"rounds": 6, "score_local_models": True}, [], seed=3)
    for k, v in plain.global_model.state_dict().items():
        assert torch.equal(v, scored.global_model.state_dict()[k])
    assert_same_client_models(plain, scored)  # the clients' models (node level: served)
    assert {k: v for k, v in scored.utility.items() if not k.startswith("local_")} == plain.utility
    assert scored.recipe.identity() == plain.recipe.identity()
    vals = [h["local_val_accuracy"] for h in scored.history]
    assert scored.utility["local_best_round"] == int(np.argmax(vals))
    assert scored.utility["local_val_accuracy"] == max(vals)
    assert not any("local_" in k for k in plain.utility)
    # one round: the kept local models are the ones the clients hold at the end
    one = FEDAVG.fit(fed, {"rounds": 1, "score_local_models": True}, [], seed=3)
    score = score_personalised if level == "node" else score_graph_personalised
    expected = score(one.client_models, fed.clients)
    assert {m: one.utility[f"local_{m}"] for m in expected} == expected
    assert expected["accuracy"] != one.utility["accuracy"]  # not the global model's figure


@pytest.fixture(scope="module")
def local_modules_run(small_graphs):
    """GCFL's FedAvg: only the GIN convolutions are shared."""
    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 3, seed=0))
    cfg = {"rounds": 4, "lr": 0.005, "keep_local": ["project", "head"]}
    return fed, FEDAVG.fit(fed, cfg, [], seed=0)


def test_local_modules_are_neither_uploaded_nor_averaged(local_modules_run):
    from fgl_workbench.transcript import MODEL_WEIGHTS

    fed, trained = local_modules_run
    weights = [m for m in trained.transcript.messages if m.kind == MODEL_WEIGHTS]
    kept = [m for m in weights if m.payload is not None]  # the last round's
    assert len(kept) == 6  # three downloads, three uploads
    for m in kept:  # up and down: the convolutions only
        assert {k.split(".", 1)[0] for k in m.payload} == {"convs"}
    convs = sum(v.numel() * v.element_size() for v in kept[0].payload.values())
    assert {m.nbytes for m in weights} == {convs}  # every round's messages too
    models = trained.client_models
    assert sorted(models) == [0, 1, 2]
    shared = trained.global_model.state_dict()
    for k, model in models.items():
        state = model.state_dict()
        for name, v in state.items():
            if name.startswith("convs."):
                assert torch.equal(v, shared[name]), (k, name)
        other = models[(k + 1) % 3].state_dict()
        assert not torch.equal(state["head.weight"], other["head.weight"])
        assert not torch.equal(state["project.weight"], other["project.weight"])


def test_local_modules_deploy_and_score_each_clients_own_model(local_modules_run):
    from fgl_workbench.query import GraphOwnerRoutedQueryAPI, GraphQueryAPI
    from fgl_workbench.targets.training import score_graph_personalised

    fed, trained = local_modules_run
    expected = score_graph_personalised(trained.client_models, fed.clients)
    assert {m: trained.utility[m] for m in expected} == expected
    vals = [h["val_accuracy"] for h in trained.history]
    assert trained.utility["best_round"] == int(np.argmax(vals))
    assert isinstance(trained.query, GraphOwnerRoutedQueryAPI)
    owner = fed.partition.owner(fed.dataset.num_items)
    ids = np.arange(fed.dataset.num_items)
    graphs = [fed.dataset.graphs[i] for i in ids]
    routed = trained.query.logits(graphs, ids)
    for k, model in trained.client_models.items():
        mine = np.flatnonzero(owner == k)
        own = GraphQueryAPI(model).logits([graphs[i] for i in mine])
        torch.testing.assert_close(routed[torch.as_tensor(mine)], own)
    # a graph no client holds: the mean of the clients' answers
    outside = trained.query.logits(graphs[:1], np.array([fed.dataset.num_items + 5]))
    mean = sum(GraphQueryAPI(m).logits(graphs[:1]) for m in trained.client_models.values()) / 3
    torch.testing.assert_close(outside, mean)
    # the recipe retrains the same deployment
    assert_same_client_models(trained, FEDAVG.fit(fed, trained.recipe.config, [], seed=0))


def test_local_modules_are_one_setting_in_any_order_and_keep_the_deployment_when_scored(
    small_graphs, local_modules_run
):
    """The same modules named in another order, or twice, are the same recipe; scoring the
    clients' models before they download leaves the deployment as it was."""
    fed, trained = local_modules_run
    cfg = {"rounds": 4, "lr": 0.005, "keep_local": ["head", "project", "head"]}
    again = FEDAVG.fit(fed, {**cfg, "score_local_models": True}, [], seed=0)
    assert again.recipe.identity() == trained.recipe.identity()
    assert_same_client_models(trained, again)
    assert {m: again.utility[m] for m in trained.utility} == trained.utility
    assert "local_accuracy" in again.utility


def test_dp_fedavg_draws_its_clients_where_the_audit_does(small_csbm, monkeypatch):
    """Under DP-FedAvg the target samples clients through ``dp_fedavg.poisson_clients`` and
    runs ``client_update`` and ``server_aggregate`` from the defense module, the code the
    canary audit plays: a break there changes the target, so the audit's catching it speaks
    for the target (a break written into the target's own loop is not played)."""
    from fgl_workbench.defenses import applied, dp_fedavg
    from fgl_workbench.transcript import MODEL_WEIGHTS, SERVER

    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 4, 0))
    dp = applied("dp-fedavg", {"noise_multiplier": 5.0})
    cfg = {"rounds": 3, "local_epochs": 1, "client_fraction": 0.25}

    def uploads(trained) -> int:
        sent = trained.transcript.messages
        return sum(m.kind == MODEL_WEIGHTS and m.receiver == SERVER for m in sent)

    sampled = uploads(FEDAVG.fit(fed, cfg, [dp], seed=0))
    monkeypatch.setattr(dp_fedavg, "poisson_clients", lambda rng, n, q: np.arange(n))
    calls = []
    for name in ("client_update", "server_aggregate"):  # the mechanism the game runs, too
        real = getattr(dp_fedavg, name)
        monkeypatch.setattr(
            dp_fedavg, name, lambda *a, _r=real, _n=name: calls.append(_n) or _r(*a)
        )
    assert uploads(FEDAVG.fit(fed, cfg, [dp], seed=0)) == 3 * 4 > sampled
    assert calls.count("client_update") == 3 * 4 and calls.count("server_aggregate") == 3


def test_each_clients_graph_is_normalised_once(small_csbm, monkeypatch):
    """Training, validation and test scoring over every round reuse one GCN normalisation
    per client (PyG's uncached GCNConv renormalised at every forward)."""
    normalised = []
    real = gcn_conv.gcn_norm

    def counted(edge_index, *args, **kwargs):
        normalised.append(id(edge_index))
        return real(edge_index, *args, **kwargs)

    monkeypatch.setattr(gcn_conv, "gcn_norm", counted)
    fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    FEDAVG.fit(fed, {"rounds": 4, "model": {"arch": "gcn", "hidden": 16}}, [], seed=0)
    assert sorted(normalised) == sorted(id(c.data.edge_index) for c in fed.clients)


def test_sampling_trains_each_client_on_sampled_batches(small_csbm, small_graphs, monkeypatch):
    """``sampling``: each client trains on sampled mini-batches, built once per client (not
    per round) and drawn every local epoch; the model learns, the same seed gives the same
    model, and graph level refuses it in one line."""
    from fgl_workbench.targets import minibatch

    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0))
    cfg = {"rounds": 3, "local_epochs": 2, "sampling": {"fanouts": [4, 4], "batch_size": 16}}
    built, drawn = [], []
    make, draw = minibatch.NeighbourBatches.__init__, minibatch.NeighbourBatches.epoch

    def counted_make(self, *args):
        built.append(1)
        make(self, *args)

    def counted_draw(self, generator):
        drawn.append(self.batch_size)
        return draw(self, generator)

    monkeypatch.setattr(minibatch.NeighbourBatches, "__init__", counted_make)
    monkeypatch.setattr(minibatch.NeighbourBatches, "epoch", counted_draw)
    a = FEDAVG.fit(fed, cfg, [], seed=0)
    assert len(built) == 2 and drawn == [16] * (3 * 2 * 2)  # clients; rounds × clients × epochs
    b = FEDAVG.fit(fed, cfg, [], seed=0)
    assert_same_client_models(a, b)
    majority = small_csbm.data.y.bincount().max().item() / small_csbm.data.num_nodes
    assert a.utility["accuracy"] > majority
    graphs = build_federation(small_graphs, make_partition(small_graphs, "iid", 2, 0))
    with pytest.raises(ConfigError, match="sampling: node level only"):
        FEDAVG.fit(graphs, {"rounds": 1, **cfg}, [], seed=0)


@pytest.mark.parametrize(
    ("level", "config"),
    [
        ("node", {"rounds": 8}),
        ("node", {"rounds": 8, "sampling": {"fanouts": [4, 4], "batch_size": 16}}),
        ("graph", {"rounds": 8, "lr": 0.005}),
    ],
)
def test_the_history_holds_each_rounds_mean_local_training_loss(
    small_csbm, small_graphs, level, config
):
    """The loss local training computes anyway, averaged over the round's steps: it falls
    as the federation learns, and the centralised target records its epochs' the same way."""
    data, method = (small_csbm, "louvain") if level == "node" else (small_graphs, "iid")
    fed = build_federation(data, make_partition(data, method, 3, seed=0))
    losses = [h["train_loss"] for h in FEDAVG.fit(fed, config, [], 0).history]
    assert len(losses) == 8 and all(0 < v < 10 for v in losses) and losses[-1] < losses[0]
    pooled = TARGETS.get("centralized").fit(fed, {"epochs": 3}, [], seed=0)
    assert [h["round"] for h in pooled.history if h["train_loss"] > 0] == [0, 1, 2]
