"""Source inference (Hu et al. 2021): the server names the client holding each training
record from the clients' uploaded models. Where each client's model memorised its own
records the accuracy interval lies above every chance line; where the server holds models
that never saw these records it holds chance; a querier is refused with the reason."""

import numpy as np
import pytest
from pydantic import ValidationError

from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.families import FAMILIES
from fgl_workbench.attacks.metrics import source_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import (
    CSBMParams,
    SyntheticGraphsParams,
    csbm,
    synthetic_graphs,
)
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS

ATTACK = ATTACKS.get("source-inference")
# one round of many local epochs from a shared start: each upload is a model fitted to its
# client's records alone
MEMORISING = {"rounds": 1, "local_epochs": 100, "keep_payloads": "all"}
NEAR_IID = {"alpha": 100.0}  # label-dirichlet: no client's class mix gives it away


def node_federation(seed: int):
    ds = csbm(CSBMParams(num_nodes=400, num_classes=4, num_features=16, seed=seed))
    return build_federation(ds, make_partition(ds, "label-dirichlet", 3, seed=0, params=NEAR_IID))


@pytest.fixture(scope="module")
def node_cells():
    fed, other = node_federation(3), node_federation(4)
    fit = TARGETS.get("fedavg").fit
    return fed, fit(fed, MEMORISING, [], 0), fit(other, MEMORISING, [], 0)


def attacked(trained, fed, cell_inputs, **params):
    cfg = ATTACK.Config(**params)
    family = FAMILIES[ATTACK.family].inputs(ATTACK, cfg, cell_inputs(trained, fed))
    out = ATTACK.run(AttackInput(family.view, family.knowledge, family.candidates), cfg, 0)
    return family.score(out)[0], out


def chance_lines(m):
    return (m["accuracy_baseline"], m["chance_uniform"], m["chance_matched"])


def test_node_models_that_memorised_their_records_name_the_holder(node_cells, cell_inputs):
    fed, trained, _ = node_cells
    m, out = attacked(trained, fed, cell_inputs)
    assert m["accuracy_ci_low"] > max(chance_lines(m))
    # the records no model trained on: their guess is the layout's, near chance here
    assert m["holdout_accuracy_ci_high"] < m["accuracy"]
    assert out.details["counts"] == {"clients_observed": 3, "uploads": 3}
    assert np.allclose(out.scores.sum(1), 1.0)


def test_models_that_never_saw_the_records_hold_chance(node_cells, cell_inputs):
    """The server holds another federation's uploads (same architecture and data law):
    the guess is independent of the holder, so the interval holds the chance lines."""
    fed, _, other = node_cells
    m, _ = attacked(other, fed, cell_inputs)
    for chance in chance_lines(m):
        assert m["accuracy_ci_low"] <= chance <= m["accuracy_ci_high"]


def test_every_kept_round_is_read(cell_inputs):
    fed = node_federation(3)
    trained = TARGETS.get("fedavg").fit(
        fed, {"rounds": 3, "local_epochs": 2, "keep_payloads": "all"}, [], 0
    )
    _, last = attacked(trained, fed, cell_inputs)
    _, every = attacked(trained, fed, cell_inputs, rounds="all")
    assert last.details["counts"]["uploads"] == 3 and every.details["counts"]["uploads"] == 9
    assert not np.allclose(last.scores, every.scores)


def test_graph_models_that_memorised_noisy_labels_name_the_holder(cell_inputs):
    """Graph level: a third of the labels are flipped, which only memorising fits, and each
    client's model memorised its own."""
    ds = synthetic_graphs(SyntheticGraphsParams(num_graphs=120, seed=3, label_noise=0.3))
    fed = build_federation(ds, make_partition(ds, "iid", 3, seed=0))
    trained = TARGETS.get("fedavg").fit(fed, MEMORISING, [], 0)
    m, _ = attacked(trained, fed, cell_inputs)
    assert m["accuracy_ci_low"] > max(chance_lines(m))
    assert m["auc"] > 0.7


def test_the_querier_is_refused_with_the_reason(node_cells, cell_inputs):
    fed, trained, _ = node_cells
    with pytest.raises(NotApplicableError, match="one released model"):
        attacked(trained, fed, cell_inputs, adversary="querier")
    tuned = {**MEMORISING, "fine_tune": {"epochs": 5, "eval_every": 5, "patience": 1}}
    routed = TARGETS.get("fedavg").fit(fed, tuned, [], 0)
    with pytest.raises(NotApplicableError, match="owner-routed"):
        attacked(routed, fed, cell_inputs, adversary="querier")


def test_no_kept_upload_leaves_nothing_to_rebuild(node_cells, cell_inputs):
    fed, _, _ = node_cells
    bare = TARGETS.get("fedavg").fit(
        fed, {"rounds": 1, "local_epochs": 1, "keep_payloads": "none"}, [], 0
    )
    with pytest.raises(NotApplicableError, match="no model weights"):
        attacked(bare, fed, cell_inputs)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"rounds": "first"}, "rounds"),
        ({"hops": -1}, "hops"),
        ({"adversary": "client"}, "adversary"),
        ({"signal": "loss"}, "signal"),
    ],
)
def test_bad_config_names_the_field(params, field):
    with pytest.raises(ValidationError, match=field):
        ATTACK.Config(**params)


def test_source_metrics_count_hits_and_chance():
    owner = np.array([0, 0, 0, 1, 2, 0, 1])
    member = np.array([True, True, True, True, True, False, False])
    probs = np.eye(3)[[0, 0, 1, 1, 2, 1, 1]]
    m = source_metrics(probs, owner, member)
    assert m["accuracy"] == 0.8 and m["records"] == 5.0
    assert m["accuracy_baseline"] == 0.6 and m["chance_uniform"] == 1 / 3
    # members 3/5, 1/5, 1/5 per client; guesses 2/5, 2/5, 1/5
    assert m["chance_matched"] == pytest.approx(0.6 * 0.4 + 0.2 * 0.4 + 0.2 * 0.2)
    assert m["precision_client_1"] == 0.5 and m["recall_client_0"] == pytest.approx(2 / 3)
    assert m["holdout_accuracy"] == 0.5
    assert m["accuracy_ci_low"] < 0.8 < m["accuracy_ci_high"]
