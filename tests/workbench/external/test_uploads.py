import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from fgl_workbench.errors import ConfigError
from fgl_workbench.external import audit_uploads


class GCN(torch.nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, 32), GCNConv(32, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


@pytest.fixture(scope="module")
def logged(cora):
    """A FedAvg federation trained elsewhere (a plain PyG loop, two clients of 60 training
    nodes each, 30 local epochs a round so each upload fits its client's nodes) whose server
    logged each round's global model and every client's upload."""
    data = cora.data
    order = np.random.default_rng(0).permutation(data.num_nodes)
    members = {0: np.sort(order[:60]), 1: np.sort(order[60:120])}
    torch.manual_seed(0)
    global_model = GCN(data.num_features, cora.num_classes)
    rounds, sent = [], []
    for _ in range(3):
        state = {k: v.clone() for k, v in global_model.state_dict().items()}
        sent.append(state)
        uploads = {}
        for k, ids in members.items():
            local = GCN(data.num_features, cora.num_classes)
            local.load_state_dict(state)
            opt = torch.optim.Adam(local.parameters(), lr=0.01)
            for _ in range(30):
                opt.zero_grad()
                out = local(data.x, data.edge_index)
                F.cross_entropy(out[ids], data.y[ids]).backward()
                opt.step()
            uploads[k] = {n: t.detach().clone() for n, t in local.state_dict().items()}
        rounds.append(uploads)
        mean = {n: torch.stack([u[n] for u in uploads.values()]).mean(0) for n in state}
        global_model.load_state_dict(mean)
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
