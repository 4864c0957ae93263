import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

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


def test_a_plain_pyg_gcn_audited_in_five_lines_matches_the_workbenchs_own_target(
    tmp_path, data_root, cora
):
    """A GCN trained with plain PyG on the split of a workbench cell, audited by LiRA with the
    user's own recipe, reads the AUC the workbench's centralised target of that architecture
    and recipe reads on the same records (each inside the other's 95 % interval)."""
    suite = {
        "name": "same-split",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": "Cora"}],
        "partitions": [PARTITION],
        "targets": [
            {
                "name": "centralized",
                "params": {
                    "model": {"arch": "gcn", "hidden": 16, "layers": 2, "dropout": 0.5},
                    "release": "last",
                    **RECIPE,
                },
            }
        ],
        "attacks": [LIRA],
    }
    run_suite(suite, tmp_path / "ours", str(data_root))
    store = ResultsStore(tmp_path / "ours", read_only=True)
    (row,) = store.attacks()
    records = store.load_records(row.cell_id, row.attack_key)
    seed = store.streams().seed(0, "partition")
    store.close()
    params = {k: v for k, v in PARTITION.items() if k not in ("method", "num_clients")}
    aux = make_partition(cora, "louvain", 1, seed, **params).aux_ids
    data, members = cora.data, records.ids[records.is_member]

    mask = torch.zeros(data.num_nodes, dtype=torch.bool)  # the user's side: five lines
    mask[members] = True
    model = train(GCN, data, mask, seed=0)
    audit = audit_model(model, data, members, nonmembers=records.ids[~records.is_member],
                        aux=aux, train_fn=train, attacks=[LIRA])  # fmt: skip

    theirs, ours = row.metrics, audit.attacks["mia-lira(num_references=8)"].metrics
    assert ours["members"] == theirs["members"] and ours["nonmembers"] == theirs["nonmembers"]
    assert theirs["auc_ci_low"] <= ours["auc"] <= theirs["auc_ci_high"], (ours, theirs)
    assert ours["auc_ci_low"] <= theirs["auc"] <= ours["auc_ci_high"], (ours, theirs)
    assert ours["auc"] > 0.6  # a real leak, not two chance readings agreeing


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
        ({"members": [0, 0, 1]}, r"^members: expected each node once"),
        ({"members": [10**6]}, r"^members: expected node ids in \[0, 2708\)"),
        ({"nonmembers": [0]}, r"^nonmembers: expected nodes that are not members"),
        ({"attacks": [{"name": "link-stealing"}]}, r"^attacks\[0\]\.name: 'link-stealing' is not"),
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
