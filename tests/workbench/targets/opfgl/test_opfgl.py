"""The O-pFGL target: one upload and one download per client, each aggregation protocol
revealing to the server only what it should and giving the clients the same statistics,
λ = 0 as plain fine-tuning, unseen test nodes when inductive, and the DP statistics' ledger."""

import copy

import numpy as np
import pytest
import torch

from fgl_workbench.accountants import epsilons_by_adversary
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses.base import applied
from fgl_workbench.defenses.masked_aggregation import KEY_SHARES, SURVIVORS, UNMASK_SHARES
from fgl_workbench.defenses.secure_aggregation import Ciphertext
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.fine_tuning import StageConfig, train_stage
from fgl_workbench.targets.opfgl.stages import fine_tuning_loss
from fgl_workbench.targets.opfgl.target import OPFGLConfig, prepare, training_graph
from fgl_workbench.transcript import (
    CIPHERTEXT,
    CLASS_STATISTICS,
    MASKED_STATISTICS,
    PUBLIC_KEY,
    SERVER,
    SURROGATE_GRAPH,
    client,
)

STAGE = {"epochs": 60, "eval_every": 10, "patience": 3}
FAST = {
    "surrogate": {"iterations": 60},
    "stage1": {**STAGE, "lr": 0.01},
    "stage2": {**STAGE, "lr": 0.005},
}


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "louvain", 4, seed=0))


def fit(federation, defenses=(), **cfg):
    return TARGETS.get("opfgl").fit(
        federation, {**FAST, **cfg}, [applied(n, p) for n, p in defenses], 0
    )


def data_messages(trained):
    protocol = (PUBLIC_KEY, KEY_SHARES, SURVIVORS, UNMASK_SHARES)
    return [m for m in trained.transcript.messages if m.kind not in protocol]


def test_one_upload_and_one_download_per_client_in_the_clear(federation):
    trained = fit(federation)
    msgs = trained.transcript.messages
    for k in range(4):
        up = [m for m in msgs if m.sender == client(k)]
        down = [m for m in msgs if m.receiver == client(k)]
        assert [m.kind for m in up] == [CLASS_STATISTICS]
        assert [m.kind for m in down] == [SURROGATE_GRAPH]
    assert 0.0 <= trained.utility["accuracy"] <= 1.0 and set(trained.client_models) == {0, 1, 2, 3}
    assert trained.utility["surrogate_nodes"] == 4.0  # one node per class


@pytest.mark.parametrize(
    ("protocol", "upload", "download"),
    [
        ("masked-aggregation", MASKED_STATISTICS, SURROGATE_GRAPH),
        ("secure-aggregation", CIPHERTEXT, CIPHERTEXT),
    ],
)
def test_secure_protocols_hide_single_uploads_and_agree_with_the_clear(
    federation, protocol, upload, download
):
    clear = fit(federation, mode="stage1")
    sealed = fit(federation, [(protocol, {})], mode="stage1")
    for k in range(4):
        up = [m for m in data_messages(sealed) if m.sender == client(k)]
        down = [m for m in data_messages(sealed) if m.receiver == client(k)]
        assert [m.kind for m in up] == [upload] and [m.kind for m in down] == [download]
    received = [m for m in sealed.transcript.received_by(SERVER) if m.kind == upload]
    if protocol == "secure-aggregation":  # ciphertexts only; the surrogate never travels
        assert all(isinstance(m.payload, Ciphertext) for m in received)
    else:  # ring elements that look nothing like statistics
        assert all(m.payload.dtype == np.uint64 for m in received)
    # the pooled statistics agree up to the fixed-point grid: the same surrogate fit
    assert sealed.utility["surrogate_alignment"] == pytest.approx(
        clear.utility["surrogate_alignment"], rel=0.05, abs=1e-6
    )


def test_masked_aggregation_survives_dropouts_up_to_its_threshold(federation):
    """Four clients, t = 3: one may vanish after sharing its keys, two abort the upload."""
    survived = fit(federation, [("masked-aggregation", {"dropout": 0.25})], mode="stage1")
    uploads = [m for m in survived.transcript.messages if m.kind == MASKED_STATISTICS]
    assert len(uploads) == 3 and survived.utility["surrogate_nodes"] == 4.0
    with pytest.raises(ConfigError, match="aborted, 2 of 4 clients survived"):
        fit(federation, [("masked-aggregation", {"dropout": 0.5})], mode="stage1")


def test_two_protocols_at_once_are_refused(federation):
    with pytest.raises(ConfigError, match="one of"):
        fit(federation, [("masked-aggregation", {}), ("secure-aggregation", {})])


def test_zero_distillation_weights_are_plain_fine_tuning(federation):
    c = federation.clients[0].data
    cfg = StageConfig(**{**STAGE, "lr": 0.01})
    torch.manual_seed(0)
    model = ModelSpec(ModelConfig(arch="gcn", dropout=0.0), c.num_features, 4, "node").build()
    teacher = torch.randn(c.num_nodes, 4)
    zero = fine_tuning_loss(c, teacher, torch.zeros(c.num_nodes))
    a = train_stage(copy.deepcopy(model), zero, c, cfg).model
    b = train_stage(copy.deepcopy(model), fine_tuning_loss(c, None, None), c, cfg).model
    for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y)
    distilled = train_stage(
        copy.deepcopy(model), fine_tuning_loss(c, teacher, torch.full((c.num_nodes,), 0.5)), c, cfg
    ).model
    assert any(
        not torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), distilled.state_dict().values(), strict=True)
    )


def test_inductive_clients_never_see_their_test_nodes(federation):
    cfg = OPFGLConfig(transductive=False)
    c = federation.clients[1]
    graph = training_graph(c, cfg)
    assert graph.num_nodes == c.num_nodes - int(c.data.test_mask.sum())
    changed = c.data.clone()
    changed.x[changed.test_mask] += 5.0
    twin = type(c)(c.client_id, changed)
    rng = np.random.default_rng(0)
    a = prepare(training_graph(c, cfg), 4, cfg, None, rng)
    b = prepare(training_graph(twin, cfg), 4, cfg, None, rng)
    np.testing.assert_array_equal(a.sums.flat(), b.sums.flat())
    moved = prepare(training_graph(twin, OPFGLConfig()), 4, cfg, None, rng)
    assert not np.array_equal(moved.sums.flat(), prepare(c.data, 4, cfg, None, rng).sums.flat())


def test_the_member_free_control_uploads_nothing_of_the_members(federation):
    cfg = OPFGLConfig(statistics_from="validation", release="stage1")
    c = federation.clients[1]
    changed = c.data.clone()
    changed.x[changed.train_mask] += 5.0
    changed.y[changed.train_mask] = (changed.y[changed.train_mask] + 1) % 4
    twin = type(c)(c.client_id, changed)
    rng = np.random.default_rng(0)
    a = prepare(training_graph(c, cfg), 4, cfg, None, rng)
    b = prepare(training_graph(twin, cfg), 4, cfg, None, rng)
    np.testing.assert_array_equal(a.sums.flat(), b.sums.flat())
    assert a.original_counts.sum() == int(c.data.val_mask.sum())
    trained = fit(federation, statistics_from="validation", release="stage1")
    assert trained.client_models[1] is not None
    with pytest.raises(ValueError, match="statistics_from: 'validation' removes the training"):
        OPFGLConfig(statistics_from="validation")


def test_statistics_noise_claims_no_finite_epsilon(federation):
    """Propagated rows, expanded labels and exact class counts: no node-level bound holds, so
    every party's ε is ∞ (it was printed from the row sensitivity √(1 + C² + C⁴))."""
    noisy = fit(federation, [("statistics-noise", {"clip": 1.0, "noise_multiplier": 2.0})])
    rows = epsilons_by_adversary(noisy.ledger, 1e-5)
    assert {r.adversary for r in rows} == {"server", "clients", "querier"}
    assert all(r.epsilon == np.inf and "statistics-noise" in r.note for r in rows)
    with pytest.raises(ConfigError, match="opfgl cannot apply 'dp-sgd'"):
        fit(federation, [("dp-sgd", {})])


def test_standalone_exchanges_nothing(federation):
    trained = fit(federation, mode="standalone")
    assert not trained.transcript.messages
    assert "surrogate_nodes" not in trained.utility
