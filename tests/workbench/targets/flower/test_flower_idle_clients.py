"""A client holding no training record (graph level, many clients and few graphs; node level,
an empty training mask) on the flower target: it trains nothing and sends back the model it
received with weight 0 and no loss, as the built-in FedAvg does, on the Message API and under
SecAgg+; a round in which every client weighs 0 keeps the model; under DP it sends the equal
weight 1 (the zero-out neighbour the ledger is stated for) and the ledger is the planned one."""

import copy
import math

import pytest
import torch

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.models import ModelSpec
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import MASKED_WEIGHTS, METRICS, MODEL_WEIGHTS, SERVER

pytest.importorskip("flwr")

FLOWER, FEDAVG = TARGETS.get("flower"), TARGETS.get("fedavg")
# no dropout and plain SGD: both targets' local training draws nothing, so the models agree
TRAINING = {"rounds": 2, "local_epochs": 1, "optimizer": "sgd", "lr": 0.1}
NODE = {**TRAINING, "model": {"arch": "gcn", "hidden": 16, "dropout": 0.0}}
GRAPH = {**TRAINING, "model": {"arch": "gin", "hidden": 8, "layers": 1, "dropout": 0.0}}
SECAGG = {"secure_aggregation": "secaggplus"}


@pytest.fixture
def same_start(monkeypatch):
    """Every model either target builds starts from the same weights (each seeds its own
    global model apart), drawn on a forked stream that leaves training's as it was."""
    build = ModelSpec.build

    def seeded(spec):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            return build(spec)

    monkeypatch.setattr(ModelSpec, "build", seeded)


def _idle(federation, clients):
    """A copy of ``federation`` whose ``clients`` hold no training node."""
    fed = copy.deepcopy(federation)
    for k in clients:
        fed.clients[k].data.train_mask[:] = False
    return fed


@pytest.fixture(scope="module")
def one_idle(federation):
    return _idle(federation, [0])


@pytest.fixture(scope="module")
def all_idle(federation):
    return _idle(federation, range(len(federation.clients)))


def _flower(federation, config, defenses=()):
    return FLOWER.fit(federation, {**config, "keep_payloads": "all"}, list(defenses), 0)


def _builtin(federation, config, defenses=()):
    return FEDAVG.fit(federation, {**config, "release": "last"}, list(defenses), 0)


def _gap(a, b):
    """The largest difference between two models' weights."""
    a = a if isinstance(a, dict) else a.global_model.state_dict()
    b = b if isinstance(b, dict) else b.global_model.state_dict()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def _reported(trained, k):
    """What client k reported with its train replies (its evaluate replies carry accuracy),
    the weight under the Message API's key (the legacy layout's is num_examples)."""
    return [
        {"num-examples": m.payload.get("num_examples"), **m.payload}
        for m in trained.transcript.messages
        if m.kind == METRICS and m.sender == f"client:{k}" and "accuracy" not in m.payload
    ]


def _upload(trained, k):
    """Client k's first model upload."""
    return next(
        m.payload
        for m in trained.transcript.messages
        if m.sender == f"client:{k}" and m.kind == MODEL_WEIGHTS
    )


def _first_sent(trained):
    """The model the server sent first (every client's in round 0)."""
    return next(
        m.payload
        for m in trained.transcript.messages
        if m.sender == SERVER and m.kind == MODEL_WEIGHTS
    )


def test_graph_level_clients_without_training_graphs_weigh_0_and_match_the_built_in(
    small_graphs, same_start
):
    """120 graphs over 60 clients: some hold no training graph (it crashed the data
    loader). The flower target's model is the built-in FedAvg's (to float error)."""
    fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 60, seed=0))
    idle = [k for k, c in enumerate(fed.clients) if len(c.train) == 0]
    assert idle
    flower = _flower(fed, GRAPH)
    assert _gap(flower, _builtin(fed, GRAPH)) < 1e-5
    assert _gap(_upload(flower, idle[0]), _first_sent(flower)) == 0.0  # unchanged
    for report in _reported(flower, idle[0]):
        assert report["num-examples"] == 0.0 and math.isnan(report["train_loss"])
    assert all(math.isfinite(row["train_loss"]) for row in flower.history)


@pytest.mark.parametrize("secure", [{}, SECAGG], ids=["message-api", "secaggplus"])
def test_a_node_level_client_with_no_training_node_weighs_0_as_in_the_built_in(
    one_idle, same_start, secure
):
    flower = _flower(one_idle, {**NODE, **secure})
    # SecAgg+'s grid: 2·8/2^22 per parameter and weight
    assert _gap(flower, _builtin(one_idle, NODE)) < (1e-4 if secure else 1e-6)
    assert [r["num-examples"] for r in _reported(flower, 0)] == [0.0, 0.0]
    assert all(math.isfinite(row["train_loss"]) for row in flower.history)


@pytest.mark.parametrize(
    "config",
    [NODE, {**NODE, **SECAGG}, {**NODE, "strategy": "fedprox"}],
    ids=["fedavg", "secaggplus", "fedprox"],
)
def test_a_round_in_which_every_client_weighs_0_keeps_the_model(all_idle, same_start, config):
    """Flower's weighted mean (and SecAgg+'s unmasking) would divide by a total weight of 0;
    the built-in FedAvg keeps the model (its plain mean of the models sent back), and so
    does the flower target."""
    flower = _flower(all_idle, config)
    assert _gap(flower, _first_sent(flower)) == 0.0
    assert _gap(flower, _builtin(all_idle, NODE)) < 1e-6
    assert all("train_loss" not in row for row in flower.history)  # nobody trained


@pytest.mark.parametrize(
    ("dp", "config"),
    [
        ({"clip": 0.5, "noise_multiplier": 0.5}, {}),
        ({"clip": 0.5, "noise_multiplier": 0.5, "mode": "local"}, {}),
        ({"clip": 0.5, "noise_multiplier": 0.5}, {**SECAGG, "dp_clipping": "client"}),
        ({"clip": 0.5, "noise_multiplier": 0.5, "mode": "local"}, SECAGG),
    ],
    ids=["central", "local", "central-secaggplus", "local-secaggplus"],
)
def test_under_dp_an_idle_client_uploads_with_weight_1_and_the_ledger_is_the_planned_one(
    one_idle, dp, config
):
    """Flower's accounted wrappers refuse weight 0, and the mean's denominator must not
    depend on the data: the idle client sends weight 1 and update 0, the zero-out neighbour
    the ledger's Gaussian is stated for; every upload of it counts in the ledger."""
    defenses = [applied("dp-fedavg", dp)]
    cfg = {**NODE, **config}
    trained = _flower(one_idle, cfg, defenses)
    assert [r["num-examples"] for r in _reported(trained, 0)] == [1.0, 1.0]
    uploads = [
        m
        for m in trained.transcript.messages
        if m.sender == "client:0" and m.kind in (MODEL_WEIGHTS, MASKED_WEIGHTS)
    ]
    assert len(uploads) == NODE["rounds"]  # it uploads every round, as the ledger counts
    assert trained.ledger == FLOWER.planned_ledger(one_idle, cfg, defenses)
    assert all(math.isfinite(row["train_loss"]) for row in trained.history)  # its NaN skipped
    if dp.get("mode") == "local" and not config:  # SecAgg+ masks it
        # LocalDpMod noised the model it received unchanged: still an upload
        assert _gap(_upload(trained, 0), _first_sent(trained)) > 0.1


def test_the_metric_mean_skips_what_a_client_did_not_measure_and_weighs_0():
    """Flower's own mean turns NaN (0 · NaN) or divides by zero here."""
    from fgl_workbench.targets.flower.apps import UNMEASURED, weighted_metrics

    replies = [
        (0.0, {"train_loss": UNMEASURED}),
        (2.0, {"train_loss": 1.0}),
        (1.0, {"train_loss": 4.0}),
    ]
    assert weighted_metrics(replies) == {"train_loss": 2.0}
    assert weighted_metrics([(0.0, {"train_loss": UNMEASURED, "accuracy": 0.5})]) == {}
