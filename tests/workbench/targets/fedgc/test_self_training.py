import pytest
import torch

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.models import ModelConfig
from fgl_workbench.targets.fedgc.exchange import NO_LABEL, extended_client
from fgl_workbench.targets.fedgc.self_training import self_train
from fgl_workbench.transcript import MODEL_WEIGHTS, SERVER


@pytest.fixture(scope="module")
def grown():
    ds = csbm(CSBMParams(num_nodes=300, num_classes=3, num_features=16, seed=4))
    fed = build_federation(ds, make_partition(ds, "label-dirichlet", 3, 0))
    return fed, tuple(extended_client(ds, c, 1)[0] for c in fed.clients)


def test_pseudo_labels_fill_only_the_clients_unlabelled_own_nodes(grown):
    fed, clients = grown
    st = self_train(fed, clients, ModelConfig(hidden=32), 60, "last_round", 0)
    for c, (y, mask) in zip(clients, st.labels, strict=True):
        d = c.data
        own = d.y != NO_LABEL
        pseudo = own & ~d.train_mask & ~d.val_mask
        assert torch.equal(mask, d.train_mask | pseudo)
        assert torch.equal(y[~pseudo], d.y[~pseudo])  # labels, validation, neighbours untouched
        assert (y[~own] == NO_LABEL).all()
    assert st.pseudo_accuracy > 0.7  # 3 classes: chance is 1/3
    assert 0.0 < st.val_accuracy <= 1.0
    uploads = [
        m for m in st.transcript.messages if m.kind == MODEL_WEIGHTS and m.receiver == SERVER
    ]
    assert len(uploads) == 3 * 60  # FedAvg: every client uploads its model every round
