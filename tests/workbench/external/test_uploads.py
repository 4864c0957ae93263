import dataclasses
from collections.abc import Mapping
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from fgl_workbench.errors import ConfigError
from fgl_workbench.external import audit_uploads
from fgl_workbench.external import uploads as uploads_module
from fgl_workbench.interface import api
from fgl_workbench.storage.store import ResultsStore

LABEL_DISTRIBUTION = "label-distribution"
ADAM_30 = {"optimizer": "adam", "lr": 0.01, "local_epochs": 30}  # the clients' round below


class GCN(torch.nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, 32), GCNConv(32, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def local_round(model, graph, mask, seed, epochs=30, optimizer=torch.optim.Adam, lr=0.01):
    """A client's local round of the federations below: full batch on its training nodes from
    a fresh optimizer (the user's ``local_fn``)."""
    opt = optimizer(model.parameters(), lr=lr)
    for _ in range(epochs):
        opt.zero_grad()
        F.cross_entropy(model(graph.x, graph.edge_index)[mask], graph.y[mask]).backward()
        opt.step()
    return model


def fedavg(data, classes, members, rounds, local):
    """FedAvg trained elsewhere (a plain PyG loop, each client on the whole graph with its
    members as training nodes): the uploads and global models its server logged, and the
    final model."""
    torch.manual_seed(0)
    global_model = GCN(data.num_features, classes)
    logged, sent = [], []
    for _ in range(rounds):
        state = {k: v.clone() for k, v in global_model.state_dict().items()}
        sent.append(state)
        uploads = {}
        for k, ids in members.items():
            local_model = GCN(data.num_features, classes)
            local_model.load_state_dict(state)
            mask = torch.zeros(data.num_nodes, dtype=torch.bool)
            mask[ids] = True
            local(local_model, data, mask, 0)
            uploads[k] = {n: t.detach().clone() for n, t in local_model.state_dict().items()}
        logged.append(uploads)
        mean = {n: torch.stack([u[n] for u in uploads.values()]).mean(0) for n in state}
        global_model.load_state_dict(mean)
    return logged, sent, global_model


@pytest.fixture(scope="module")
def logged(cora):
    """Two clients of 60 training nodes each, 30 local epochs a round so each upload fits
    its client's nodes, three rounds."""
    data = cora.data
    order = np.random.default_rng(0).permutation(data.num_nodes)
    members = {0: np.sort(order[:60]), 1: np.sort(order[60:120])}
    rounds, sent, global_model = fedavg(data, cora.num_classes, members, 3, local_round)
    return data, members, rounds, sent, global_model


@pytest.fixture(scope="module")
def skewed(cora):
    """Six clients of 60 training nodes, three quarters of each from one class of its own
    (classes 0 to 5), two rounds of 10 local epochs."""
    data = cora.data
    y = data.y.numpy()
    rng = np.random.default_rng(1)
    free = np.ones(y.size, bool)
    members = {}
    for k in range(6):
        main = rng.choice(np.flatnonzero(free & (y == k)), 45, replace=False)
        free[main] = False
        rest = rng.choice(np.flatnonzero(free & (y != k)), 15, replace=False)
        free[rest] = False
        members[k] = np.sort(np.concatenate([main, rest]))
    rounds, sent, global_model = fedavg(
        data, cora.num_classes, members, 2, partial(local_round, epochs=10)
    )
    return data, members, rounds, sent, global_model


def test_the_server_reads_each_clients_upload_on_its_own_records(logged):
    data, members, rounds, sent, model = logged
    audit = audit_uploads(rounds, model, data, members, global_models=sent, name="their FL")
    anyone = audit.attacks["mia-threshold(adversary=server, signal=loss)"]
    own = audit.attacks["mia-threshold(adversary=server, signal=loss), each client's own upload"]
    assert anyone.metrics["members"] == own.metrics["members"] == 120
    assert set(own.groups) == {"client 0", "client 1"}
    assert own.metrics["auc_ci_low"] > 0.5  # 60 nodes fitted for 90 epochs: the uploads leak
    assert "their FL" in audit.summary()


def test_logged_updates_read_as_the_weights_they_add_up_to(logged):
    data, members, rounds, sent, model = logged
    weights = audit_uploads(rounds, model, data, members, global_models=sent)
    deltas = [
        {k: {n: t - sent[r][n] for n, t in up.items()} for k, up in uploads.items()}
        for r, uploads in enumerate(rounds)
    ]
    updates = audit_uploads(deltas, model, data, members, global_models=sent, updates=True)
    for label, a in weights.attacks.items():
        assert updates.attacks[label].metrics["auc"] == pytest.approx(a.metrics["auc"], abs=1e-6)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"members": {0: [1, 2], 1: [2, 3]}}, r"^members\[1\]: expected records no other client"),
        ({"members": [1, 2]}, r"^members: expected a mapping of client id"),
        ({"updates": True, "global_models": None}, r"^global_models: updates need"),
        ({"rounds": [{0: "weights"}]}, r"^rounds\[0\]\[0\]: expected a state dict of tensors"),
        ({"rounds": [{0: {"w": torch.zeros(1)}}]}, r"^rounds\[0\]\[0\]: expected exactly model's"),
        ({"rounds": []}, r"^rounds: expected at least one round"),
        ({"members": {"a": [1]}}, r"^members: expected whole-number client ids"),
        (
            {"attacks": [{"name": "mia-threshold"}]},
            r"^attacks\[0\]\.params\.adversary: this audit observes as the server",
        ),
        ({"global_models": []}, r"^global_models: expected the model the server sent in each"),
        ({"local_fn": "train"}, r"^local_fn: expected a function"),
        ({"local_fn": lambda *a: None}, r"^local_fn: expected it to return the locally trained"),
        ({"recipe": {"optimizer": "rmsprop"}}, r"^recipe\.optimizer: "),
        ({"recipe": {**ADAM_30, "lr": 0}}, r"^recipe\.lr: "),
        ({"recipe": {**ADAM_30, "momentum": 0.9}}, r"^recipe\.momentum: "),
        (
            {"attacks": [{"name": "gradient-inversion", "params": {"client": 7}}]},
            r"^attacks\[0\]\.params\.client: expected a client that trained \(one of \[0, 1\]\)",
        ),
        (
            {"attacks": [{"name": "link-stealing"}]},
            r"^attacks\[0\]\.name: 'link-stealing' is a link attack",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_field(logged, change, message):
    data, members, rounds, sent, model = logged
    given = {"rounds": rounds, "members": members, "global_models": sent, **change}
    with pytest.raises(ConfigError, match=message):
        audit_uploads(given.pop("rounds"), model, data, given.pop("members"), **given)


def test_a_client_with_members_but_no_upload_is_named(logged):
    data, members, rounds, sent, model = logged
    only_zero = [{0: uploads[0]} for uploads in rounds]
    with pytest.raises(ConfigError, match=r"^rounds: client 1 has members but uploaded nothing"):
        audit_uploads(only_zero, model, data, members, global_models=sent)


def test_the_users_local_round_reads_skewed_clients_label_distributions(skewed, tmp_path):
    data, members, rounds, sent, model = skewed
    audit = audit_uploads(
        rounds,
        model,
        data,
        members,
        global_models=sent,
        local_fn=partial(local_round, epochs=10),
        attacks=[{"name": LABEL_DISTRIBUTION}],
    )
    m = audit.inferences[LABEL_DISTRIBUTION].metrics
    assert m["clients"] == 6
    # the interval over six clients is wide (t with 5 degrees of freedom), and still clear
    # of predicting the pool's label fractions for every client
    assert m["tv_mean_ci_low"] <= m["tv_mean"] <= m["tv_mean_ci_high"] < m["tv_baseline"]
    assert m["dominant_accuracy"] >= 5 / 6 > m["dominant_baseline"]
    assert 0.0 <= m["dominant_accuracy_ci_low"] < m["dominant_accuracy"]
    assert "label-distribution: tv_mean" in audit.summary()
    assert audit.records().empty  # no record was scored, and saying so is no error
    assert "label-distribution" in audit.report(tmp_path / "audit.html").read_text()


def test_label_distribution_is_a_default_that_needs_the_clients_local_round(logged):
    data, members, rounds, sent, model = logged
    audit = audit_uploads(rounds, model, data, members, global_models=sent)
    assert "local_fn=" in audit.not_applicable[LABEL_DISTRIBUTION]
    no_models = audit_uploads(rounds, model, data, members)
    assert LABEL_DISTRIBUTION not in no_models.not_applicable | no_models.inferences


def test_gradient_inversion_of_a_logged_upload_is_scored_beside_the_priors(logged):
    data, members, rounds, sent, model = logged
    inversion = {"name": "gradient-inversion", "params": {"client": 1, "steps": 5}}
    audit = audit_uploads(
        rounds, model, data, members, global_models=sent, recipe=ADAM_30, attacks=[inversion]
    )
    m = audit.inferences["gradient-inversion(client=1, steps=5)"].metrics
    assert m["rows"] == 60
    for key in ("cosine", "feature_auc", "label_accuracy"):
        assert m[key] is not None and np.isfinite(m[key]) and m[f"{key}_baseline"] is not None
    assert m["label_accuracy_ci_low"] <= m["label_accuracy"] <= m["label_accuracy_ci_high"]


def test_a_small_clients_single_step_gives_its_features_away(cora):
    """Eight training nodes a client, one SGD step: the update is near one gradient, which
    gradient inversion reads beyond the pool's prior (the 60-node, 30-epoch Adam rounds
    above are read no better than it)."""
    data = cora.data
    members = {0: np.arange(8) * 300, 1: np.arange(8) * 300 + 7}
    sgd = partial(local_round, epochs=1, optimizer=torch.optim.SGD, lr=0.5)
    rounds, sent, model = fedavg(data, cora.num_classes, members, 1, sgd)
    recipe = {"optimizer": "sgd", "lr": 0.5, "local_epochs": 1}
    inversion = {"name": "gradient-inversion", "params": {"steps": 200}}
    audit = audit_uploads(
        rounds, model, data, members, global_models=sent, recipe=recipe, attacks=[inversion]
    )
    m = audit.inferences["gradient-inversion(steps=200)"].metrics
    assert m["cosine"] > m["cosine_baseline"] + 0.1
    assert m["feature_auc"] > m["feature_auc_baseline"] + 0.05


def test_gradient_inversion_says_what_it_lacks(logged):
    data, members, rounds, sent, model = logged
    attacks = [
        {"name": "mia-threshold", "params": {"adversary": "server"}},
        {"name": "gradient-inversion", "params": {"steps": 1}},
        {"name": "gradient-inversion", "params": {"steps": 1, "structure": "known"}},
    ]
    no_recipe = audit_uploads(rounds, model, data, members, global_models=sent, attacks=attacks)
    assert "recipe=" in no_recipe.not_applicable["gradient-inversion(steps=1)"]
    edges = no_recipe.not_applicable["gradient-inversion(steps=1, structure=known)"]
    assert "knows no client's edges" in edges
    no_models = audit_uploads(rounds, model, data, members, recipe=ADAM_30, attacks=attacks)
    assert "kept no round" in no_models.not_applicable["gradient-inversion(steps=1)"]


def test_the_upload_attacks_see_no_clients_record(logged, monkeypatch):
    """Everything the label-distribution and gradient-inversion attacks are handed, walked:
    no label vector, no feature row and no edge of a record any client holds, only the
    server's pool of records no client holds, the uploads and the global models."""
    data, members, rounds, sent, model = logged
    rest = np.setdiff1d(np.arange(data.num_nodes), np.concatenate(list(members.values())))
    nonmembers = {0: rest[:60], 1: rest[60:120]}
    held = np.concatenate([*members.values(), *nonmembers.values()])
    given, run = [], uploads_module.ran

    def recorded(attack, config, inp, seed):
        if attack == "mia-threshold":
            return run(attack, config, inp, seed)
        given.append(inp)
        return "recorded"

    monkeypatch.setattr(uploads_module, "ran", recorded)
    audit_uploads(
        rounds,
        model,
        data,
        members,
        nonmembers=nonmembers,
        global_models=sent,
        recipe=ADAM_30,
        attacks=[
            {"name": "mia-threshold", "params": {"adversary": "server"}},
            {"name": LABEL_DISTRIBUTION},
            {"name": "gradient-inversion"},
        ],
    )
    assert len(given) == 2
    x, y = data.x.numpy(), data.y.numpy()
    pool = np.setdiff1d(np.arange(data.num_nodes), held)
    # Cora repeats some feature rows: one a pool node also has is the server's to know
    rows = {x[i].tobytes() for i in held} - {x[i].tobytes() for i in pool}
    for inp in given:
        knowledge = inp.knowledge
        assert not set(knowledge.aux_ids.tolist()) & set(held.tolist())
        assert np.array_equal(knowledge.aux_labels, y[knowledge.aux_ids])
        assert not np.isin(knowledge.graph.edge_index.numpy(), held).any()
        assert set(np.asarray(inp.candidates).tolist()) <= set(members)
        for path, value in _reachable(inp, "input"):
            if isinstance(value, Data):
                assert "y" not in value, path
                continue
            a = np.asarray(value)
            if a.ndim == 1 and a.dtype.kind in "iu":
                for ids in (np.arange(y.size), *members.values(), *nonmembers.values()):
                    assert not np.array_equal(a, y[ids]), path
            if a.ndim == 2 and a.shape[1] == x.shape[1]:
                assert not {r.tobytes() for r in a.astype(x.dtype)} & rows, path


def _reachable(obj, path):
    """(path, value) of every tensor, array and PyG graph inside ``obj``: dataclasses,
    mappings and sequences opened; functions (the user's model factory) left closed."""
    if isinstance(obj, torch.Tensor):
        yield path, obj.numpy(force=True)
    elif isinstance(obj, np.ndarray):
        yield path, obj
    elif isinstance(obj, Data):
        yield path, obj
        for key, value in obj.items():
            yield from _reachable(value, f"{path}.{key}")
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _reachable(getattr(obj, f.name), f"{path}.{f.name}")
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from _reachable(value, f"{path}[{key!r}]")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _reachable(value, f"{path}[{i}]")


def test_out_writes_the_logged_federation_as_a_results_folder(skewed, tmp_path):
    data, members, rounds, sent, model = skewed
    local = partial(local_round, epochs=10)
    audit = audit_uploads(
        rounds, model, data, members, global_models=sent, local_fn=local, out=tmp_path
    )
    frame = api.results(tmp_path).set_index("attack_label")
    reading = "mia-threshold(adversary=server, scored_by=each client's own upload, signal=loss)"
    own = audit.attacks["mia-threshold(adversary=server, signal=loss), each client's own upload"]
    assert frame.loc[reading, "metric.auc"] == own.metrics["auc"]
    tv = audit.inferences[LABEL_DISTRIBUTION].metrics["tv_mean"]
    assert frame.loc[LABEL_DISTRIBUTION, "metric.tv_mean"] == tv
    assert (frame["num_clients"] == len(members)).all() and (frame["target"] == "external").all()
    cell = ResultsStore(tmp_path, read_only=True).cells()[0]
    states = [state for r in rounds for state in r.values()]
    uploaded = sum(t.numel() * t.element_size() for s in states for t in s.values())
    assert cell.comm["bytes"]["up"] == uploaded and cell.comm["rounds"] == len(rounds)
    assert (tmp_path / "report.html").is_file()
