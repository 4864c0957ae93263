import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, GINConv, global_mean_pool

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.partition import make_partition
from fgl_workbench.errors import ConfigError
from fgl_workbench.external import audit_model
from fgl_workbench.interface.api import run_suite
from fgl_workbench.storage.store import ResultsStore

RECIPE = {"epochs": 100, "lr": 0.01, "weight_decay": 5e-4}
PARTITION = {"method": "louvain", "num_clients": 1, "split": [0.2, 0.0, 0.8], "aux_fraction": 0.5}
LIRA = {"name": "mia-lira", "params": {"num_references": 8}}


class GCN(torch.nn.Module):
    """The PyG tutorial's two-layer GCN, as a user writes it (nothing of the workbench)."""

    def __init__(self, features: int = 1433, classes: int = 7) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, 16), GCNConv(16, classes)

    def forward(self, x, edge_index):
        h = F.dropout(F.relu(self.conv1(x, edge_index)), 0.5, self.training)
        return self.conv2(h, edge_index)


def train(factory, data, mask, seed):
    """The user's recipe, which the audit replays for its reference models."""
    torch.manual_seed(seed)
    model = factory()
    opt = torch.optim.Adam(model.parameters(), lr=RECIPE["lr"], weight_decay=RECIPE["weight_decay"])
    for _ in range(RECIPE["epochs"]):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index)[mask], data.y[mask]).backward()
        opt.step()
    return model


class GIN(torch.nn.Module):
    """A plain PyG GIN graph classifier: input projection, GINConv blocks, mean pooling."""

    def __init__(self, features: int, classes: int, hidden: int = 64, layers: int = 3) -> None:
        super().__init__()
        self.project = torch.nn.Linear(features, hidden)
        self.convs = torch.nn.ModuleList(
            GINConv(
                torch.nn.Sequential(
                    torch.nn.Linear(hidden, hidden),
                    torch.nn.ReLU(),
                    torch.nn.Linear(hidden, hidden),
                )
            )
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, edge_index, batch):
        x = self.project(x)
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.head(global_mean_pool(x, batch))


def train_graphs(factory, graphs, mask, seed):
    torch.manual_seed(seed)
    model = factory()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.0)
    picked = [g for g, m in zip(graphs, mask.tolist(), strict=True) if m]
    loader = DataLoader(picked, batch_size=32, shuffle=True)
    model.train()
    for _ in range(GRAPH_EPOCHS):
        for b in loader:
            opt.zero_grad()
            F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1)).backward()
            opt.step()
    return model


GRAPH_EPOCHS = 100


def workbench_row(tmp_path, data_root, dataset, partition, target, params=None):
    """The workbench's own centralised target on ``dataset`` and its LiRA row, with the
    cell's records and the adversary's pool (drawn again from the cell's partition seed)."""
    suite = {
        "name": "same-split",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": dataset.name, "params": params or {}}],
        "partitions": [partition],
        "targets": [{"name": "centralized", "params": target}],
        "attacks": [LIRA],
    }
    run_suite(suite, tmp_path / "ours", str(data_root))
    store = ResultsStore(tmp_path / "ours", read_only=True)
    (row,) = store.attacks()
    records = store.load_records(row.cell_id, row.attack_key)
    seed = store.streams().seed(0, "partition")
    store.close()
    params = {k: v for k, v in partition.items() if k not in ("method", "num_clients")}
    aux = make_partition(dataset, partition["method"], 1, seed, **params).aux_ids
    return row.metrics, records, aux


def assert_same_reading(ours, theirs):
    """The two AUCs agree within the 95 % interval of their difference (each is an estimate
    from its own trained models, so the difference carries both errors: a standard error from
    each interval's width), on the same records; and one of them tells a leak from chance
    (not two chance readings agreeing)."""
    assert ours["members"] == theirs["members"] and ours["nonmembers"] == theirs["nonmembers"]
    se = [(m["auc_ci_high"] - m["auc_ci_low"]) / (2 * 1.96) for m in (ours, theirs)]
    assert abs(ours["auc"] - theirs["auc"]) <= 1.96 * np.hypot(*se), (ours, theirs)
    assert max(ours["auc_ci_low"], theirs["auc_ci_low"]) > 0.5, (ours, theirs)


@pytest.mark.slow  # 1-4 minutes on two cores; the default run keeps this module's shorter cases
def test_a_plain_pyg_gcn_audited_in_five_lines_matches_the_workbenchs_own_target(
    tmp_path, data_root, cora
):
    """A GCN trained with plain PyG on the split of a workbench cell, audited by LiRA with the
    user's own recipe, reads the AUC the workbench's centralised target of that architecture
    and recipe reads on the same records."""
    target = {"model": {"arch": "gcn", "hidden": 16, "layers": 2, "dropout": 0.5}, **RECIPE}
    theirs, records, aux = workbench_row(
        tmp_path, data_root, cora, PARTITION, {**target, "release": "last"}
    )
    data, members = cora.data, records.ids[records.is_member]

    mask = torch.zeros(data.num_nodes, dtype=torch.bool)  # the user's side: five lines
    mask[members] = True
    model = train(GCN, data, mask, seed=0)
    audit = audit_model(model, data, members, nonmembers=records.ids[~records.is_member],
                        aux=aux, train_fn=train, attacks=[LIRA])  # fmt: skip

    assert_same_reading(audit.attacks["mia-lira(num_references=8)"].metrics, theirs)


@pytest.mark.slow  # about 4 minutes: two sets of 8 reference GINs of 100 epochs
def test_a_plain_pyg_gin_at_graph_level_matches_the_workbenchs_own_target(tmp_path, data_root):
    """The same at graph level: a GIN on the embedded graph set whose mislabelled graphs a
    model fits only by memorising them (the quickstart's), trained with plain PyG."""
    params = {"num_graphs": 400, "num_features": 32, "signal": 0.3, "label_noise": 0.2}
    dataset = load_dataset("synthetic-graphs", params)
    partition = {"method": "iid", "num_clients": 1, "split": [0.5, 0.0, 0.5], "aux_fraction": 0.5}
    target = {
        "model": {"arch": "gin", "hidden": 128, "layers": 2, "dropout": 0.0},
        "epochs": GRAPH_EPOCHS,
        "lr": 0.01,
        "weight_decay": 0.0,
        "batch_size": 32,
        "release": "last",
    }
    theirs, records, aux = workbench_row(tmp_path, data_root, dataset, partition, target, params)
    graphs, members = dataset.graphs, records.ids[records.is_member]

    def factory():
        return GIN(dataset.num_features, dataset.num_classes, hidden=128, layers=2)

    mask = torch.zeros(len(graphs), dtype=torch.bool)
    mask[members] = True
    model = train_graphs(factory, graphs, mask, seed=0)
    audit = audit_model(model, graphs, members, nonmembers=records.ids[~records.is_member],
                        aux=aux, train_fn=train_graphs, attacks=[LIRA])  # fmt: skip

    assert_same_reading(audit.attacks["mia-lira(num_references=8)"].metrics, theirs)


def test_without_a_recipe_it_warns_and_trains_references_itself(cora):
    data = cora.data
    members = np.flatnonzero(np.random.default_rng(0).random(data.num_nodes) < 0.1)
    mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    mask[members] = True
    model = train(lambda: GCN(data.num_features, cora.num_classes), data, mask, 0)
    threshold = {"name": "mia-threshold", "params": {"signal": "loss"}}
    with pytest.warns(UserWarning, match="no train_fn given"):
        audit = audit_model(model, data, mask, attacks=[threshold], name="my GCN")
    result = audit.attacks["mia-threshold(signal=loss)"]
    assert result.metrics["members"] == members.size == result.metrics["nonmembers"]
    assert "my GCN" in audit.summary() and set(audit.records()["attack"]) == {
        "mia-threshold(signal=loss)"
    }


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"members": [0, 0, 1]}, r"^members: expected each record once"),
        ({"attacks": []}, r"^attacks: expected at least one attack"),
        ({"attacks": [{"name": "mia-lira"}, {"name": "mia-lira"}]}, r"^attacks: expected each"),
        ({"delta": 0.0}, r"^delta: expected a number in \(0, 1\)"),
        ({"members": [10**6]}, r"^members: expected ids in \[0, 2708\)"),
        ({"nonmembers": [0]}, r"^nonmembers: expected records that are not members"),
        (
            {"attacks": [{"name": "feature-inversion"}]},
            r"^attacks\[0\]\.name: 'feature-inversion' is a feature attack",
        ),
        (
            {"attacks": [{"name": "mia-threshold", "params": {"adversary": "server"}}]},
            r"^attacks\[0\]\.params\.adversary: this audit observes as the querier",
        ),
        (
            {"attacks": [{"name": "mia-lira", "params": {"trained_as": "centralized"}}]},
            r"^attacks\[0\]\.params\.trained_as: reference models are trained by your",
        ),
        (
            {"attacks": [{"name": "mia-lira", "params": {"num_references": 1}}]},
            r"^attacks\[0\]\.params\.num_references",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_field(cora, kwargs, message):
    given = {"members": [0, 1], "train_fn": train, **kwargs}
    with pytest.raises(ConfigError, match=message):
        audit_model(GCN(), cora.data, given.pop("members"), **given)


@pytest.mark.slow  # 1-4 minutes on two cores; the default run keeps this module's shorter cases
def test_graph_level_without_a_recipe_trains_its_references_by_the_default_one():
    dataset = load_dataset("synthetic-graphs", {"num_graphs": 120, "num_features": 8})
    graphs = dataset.graphs
    mask = torch.arange(len(graphs)) < 30
    model = train_graphs(lambda: GIN(8, dataset.num_classes, hidden=16, layers=1), graphs, mask, 0)
    rmia = {"name": "mia-rmia", "params": {"num_references": 2}}
    with pytest.warns(UserWarning, match="no train_fn given"):
        audit = audit_model(model, graphs, mask, attacks=[rmia])
    assert audit.attacks["mia-rmia(num_references=2)"].metrics["members"] == 30


def test_a_plugin_attack_is_refused_before_any_of_it_runs(cora, tmp_path, monkeypatch):
    """Who trained is in the auditing process: a plug-in, which a suite runs fenced, is not
    imported here at all (its import would touch the marker)."""
    marker = tmp_path / "imported"
    (tmp_path / "cheat.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^attacks\[0\]\.name: 'cheat:Attack' is a plug-in"):
        audit_model(GCN(), cora.data, [0, 1], train_fn=train, attacks=[{"name": "cheat:Attack"}])
    assert not marker.exists()


def test_opacus_epsilon_joins_the_audit_per_graph_and_is_infinite_per_node(cora):
    """A graph is one clipped per-sample gradient: Opacus's history gives its ε against a
    querier (within Opacus's own figure); a node enters its neighbours' gradients too, so the
    same history bounds nothing per node, and the audit says ∞ with why."""
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    for _ in range(300):
        accountant.step(noise_multiplier=1.1, sample_rate=0.05)
    dataset = load_dataset("synthetic-graphs", {"num_graphs": 120, "num_features": 8})
    mask = torch.arange(120) < 30
    gin = train_graphs(
        lambda: GIN(8, dataset.num_classes, hidden=16, layers=1), dataset.graphs, mask, 0
    )
    threshold = [{"name": "mia-threshold", "params": {"signal": "loss"}}]
    audit = audit_model(gin, dataset.graphs, mask, train_fn=train_graphs, attacks=threshold,
                        privacy=accountant)  # fmt: skip
    (claim,) = audit.epsilons
    assert (claim.adversary, claim.unit) == ("querier", "record")
    assert claim.epsilon == pytest.approx(accountant.get_epsilon(1e-5), rel=0.02)
    assert claim.epsilon <= accountant.get_epsilon(1e-5) + 1e-9
    assert "per graph against a querier" in audit.summary()

    mask = torch.zeros(cora.data.num_nodes, dtype=torch.bool)
    mask[:40] = True
    gcn = train(GCN, cora.data, mask, 0)
    audit = audit_model(gcn, cora.data, mask, train_fn=train, attacks=threshold,
                        privacy=accountant)  # fmt: skip
    (claim,) = audit.epsilons
    assert (
        claim.unit == "node" and claim.epsilon == float("inf") and "message passing" in claim.note
    )
    with pytest.raises(ConfigError, match=r"^privacy: expected an Opacus PrivacyEngine"):
        audit_model(gcn, cora.data, mask, train_fn=train, attacks=threshold, privacy=3.0)
    audit = audit_model(gin, dataset.graphs, mask[:120], train_fn=train_graphs, attacks=threshold,
                        privacy=[(0.0, 0.05, 10)])  # fmt: skip
    assert audit.epsilons[0].epsilon == float("inf")  # no noise in a phase: nothing bounded


class BareParameter(torch.nn.Module):
    """A model holding a parameter no ``reset_parameters`` reaches (the review's C1)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(1433, 7))

    def forward(self, x, edge_index):
        return x @ self.weight


def test_a_parameter_no_reset_reaches_needs_a_factory(cora):
    """Copied and re-initialised, such a model's reference models would start from the
    trained weights: refused, naming the parameter, until the user passes a factory."""
    threshold = [{"name": "mia-threshold", "params": {"signal": "loss"}}]
    with pytest.raises(ConfigError, match=r"^model: no reset_parameters\(\) re-initialises weight"):
        audit_model(BareParameter(), cora.data, [0, 1], train_fn=train, attacks=threshold)
    audit = audit_model(BareParameter(), cora.data, [0, 1], train_fn=train, attacks=threshold,
                        model_factory=BareParameter)  # fmt: skip
    assert audit.attacks["mia-threshold(signal=loss)"].metrics["members"] == 2
    with pytest.raises(ConfigError, match=r"^model_factory: expected it to build"):
        audit_model(BareParameter(), cora.data, [0, 1], train_fn=train, model_factory=GCN)


def test_node_labels_must_be_one_class_index_per_node(cora):
    data = cora.data.clone()
    data.y = data.y[:, None]
    with pytest.raises(ConfigError, match=r"^data\.y: expected one class index"):
        audit_model(GCN(), data, [0, 1], train_fn=train)


def test_default_nonmembers_match_the_members_classes(cora):
    """A class-balanced training split asked about against random nodes would be told apart by
    the label alone: the default non-members follow the members' classes."""
    members = np.concatenate([np.flatnonzero(cora.data.y.numpy() == c)[:10] for c in range(7)])
    threshold = [{"name": "mia-threshold", "params": {"signal": "loss"}}]
    gcn = train(
        GCN, cora.data, torch.isin(torch.arange(cora.data.num_nodes), torch.tensor(members)), 0
    )
    audit = audit_model(gcn, cora.data, members, train_fn=train, attacks=threshold)
    records = audit.records()
    counts = np.bincount(cora.data.y.numpy()[records["id"][~records["is_member"]]], minlength=7)
    assert counts.tolist() == [10] * 7


def test_an_attack_that_cannot_run_is_named_and_the_others_still_run(cora):
    """Without an auxiliary pool RMIA has no reference data: said per attack, not a stop."""
    mask = torch.zeros(cora.data.num_nodes, dtype=torch.bool)
    mask[:40] = True
    gcn = train(GCN, cora.data, mask, 0)
    attacks = [{"name": "mia-threshold", "params": {"signal": "loss"}}, {"name": "mia-rmia"}]
    audit = audit_model(gcn, cora.data, mask, aux=[], train_fn=train, attacks=attacks)
    assert list(audit.attacks) == ["mia-threshold(signal=loss)"]
    assert "mia-rmia" in audit.not_applicable and "mia-rmia: not applicable" in audit.summary()
    with pytest.raises(ConfigError, match=r"^attacks: none could run"):
        audit_model(gcn, cora.data, mask, aux=[], train_fn=train, attacks=attacks[1:])
