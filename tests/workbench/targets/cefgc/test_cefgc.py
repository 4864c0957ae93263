"""CeFGC end to end on MUTAG at toy sizes: three communication rounds whose bytes are the
paper's Table 1 formula for our parameter counts, generators per class (CeFGC) or one with
the label channel (CeFGC*), synthetic graphs of the senders' classes, one unweighted average,
the suite runner with attacks on the released GIN and on the shared generators, and CeFGC+'s
encrypted pairing, whose averages a partner client undoes."""

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian, epsilon
from fgl_workbench.adversary.threat import client_view
from fgl_workbench.attacks.generators import opened_payloads, undo_pairing
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses.base import applied
from fgl_workbench.defenses.dp_sgd import DPSGDConfig
from fgl_workbench.defenses.secure_aggregation import Ciphertext
from fgl_workbench.errors import ConfigError
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.cefgc.diffusion import dsm_loss
from fgl_workbench.targets.cefgc.generator import (
    ALL_CLASSES,
    GeneratorConfig,
    class_scale,
    client_generators,
    dense,
    train_generator,
    trainable,
)
from fgl_workbench.targets.cefgc.pairing import flatten
from fgl_workbench.targets.cefgc.target import CeFGCConfig, synthesise
from fgl_workbench.transcript import GENERATIVE_MODEL, MODEL_WEIGHTS, SERVER, payload_nbytes

TOY = {
    "generator": {"epochs": 2, "steps": 5, "max_nodes": 28, "channels": [2, 2]},
    "epochs": 100,
    "patience": 20,
    "synthetic_ratio": 0.5,
}


@pytest.fixture(scope="module")
def federation(data_root):
    ds = load_dataset("MUTAG", root=data_root)
    return build_federation(ds, make_partition(ds, "iid", 3, 0, split=(0.7, 0.1, 0.2)))


@pytest.fixture(scope="module")
def starred(federation):
    return TARGETS.get("cefgc").fit(federation, {**TOY, "label_channel": True}, [], 0)


def _bytes(trained, round_, kind, direction):
    return sum(
        m.nbytes
        for m in trained.transcript.messages
        if m.round == round_ and m.kind == kind and m.direction == direction
    )


def test_three_rounds_cost_the_papers_formula(starred, federation):
    assert sorted({m.round for m in starred.transcript.messages}) == [0, 1, 2]
    n = federation.partition.num_clients
    uploads = [m.payload for m in starred.transcript.messages if m.round == 0]
    (model,) = uploads[0]["models"].values()  # CeFGC*: one generator per client
    dm = 4 * sum(v.numel() for v in model.values()) + 8 * uploads[0]["classes"].numel()
    gnn = payload_nbytes(starred.global_model.state_dict())  # parameters and BatchNorm buffers
    assert _bytes(starred, 0, GENERATIVE_MODEL, "up") == dm * n  # round 1: D(DM)·N
    assert _bytes(starred, 1, GENERATIVE_MODEL, "down") == dm * (n - 1) * n  # round 2
    assert _bytes(starred, 2, MODEL_WEIGHTS, "up") == gnn * n  # round 3: D(GNN)·N
    # the initial GIN sent in round 2 is real traffic the paper's formula leaves out
    assert _bytes(starred, 1, MODEL_WEIGHTS, "down") == gnn * n


def test_each_client_gets_every_other_generator_and_none_of_its_own(starred):
    ups = [m for m in starred.transcript.messages if m.round == 0]
    downs = [m for m in starred.transcript.messages if m.round == 1 and m.kind == GENERATIVE_MODEL]
    for k, m in enumerate(downs):
        own = ups[k].payload["models"]
        assert len(m.payload) == len(ups) - 1
        assert not any(p["models"] is own for p in m.payload)


def test_the_released_model_is_the_unweighted_mean_of_the_uploads(starred):
    uploads = [m.payload for m in starred.transcript.messages if m.round == 2]
    for key, value in starred.global_model.state_dict().items():
        if value.is_floating_point():
            mean = torch.stack([u[key] for u in uploads]).mean(0)
            torch.testing.assert_close(value, mean)
    assert starred.utility["auc"] > 0.6  # MUTAG; even toy generators leave the GIN its signal
    assert starred.utility["synthetic_graphs"] > 0


def test_basic_cefgc_uploads_one_generator_per_class(federation):
    trained = TARGETS.get("cefgc").fit(federation, TOY, [], 0)
    for m in trained.transcript.messages:
        if m.round == 0:
            assert set(m.payload["models"]) == set(m.payload["classes"].tolist()) == {0, 1}
    assert trained.transcript.messages[0].receiver == SERVER


def test_synthetic_graphs_carry_the_senders_classes_and_the_receivers_shapes(federation):
    cfg = CeFGCConfig(**{**TOY, "label_channel": True})
    c = federation.clients[0]
    gen = torch.Generator().manual_seed(0)
    payload = client_generators(
        trainable(federation.clients[1].train, cfg.generator), cfg.generator, True, gen
    )
    fake = synthesise([payload], c, cfg, 7, gen)
    # at ratio 0.5 each own graph lends its features once or not at all
    copied = Counter(g.x.numpy().tobytes() for g in fake)
    own = Counter(g.x.numpy().tobytes() for g in trainable(c.train, cfg.generator))
    assert len(fake) > 0 and not copied - own
    sizes = {g.num_nodes for g in c.train}
    assert {int(g.y) for g in fake} <= set(payload["classes"].tolist())
    assert all(g.num_nodes in sizes for g in fake)
    for g in fake:  # undirected, no self-loops
        pairs = set(map(tuple, g.edge_index.T.tolist()))
        assert all((v, u) in pairs and u != v for u, v in pairs)
    assert class_scale(0) < class_scale(1) < class_scale(2)


def test_across_datasets_each_member_is_scored_on_its_own_classes(data_root):
    mix = load_dataset("graph-mixture", {"members": ["MUTAG", "PTC_MR"]}, root=data_root)
    fed = build_federation(mix, make_partition(mix, "cross-dataset", 2, 0))
    trained = TARGETS.get("cefgc").fit(fed, {**TOY, "label_channel": True}, [], 0)
    assert set(trained.utility) >= {"auc", "auc/MUTAG", "auc/PTC_MR"}
    assert all(np.isfinite(trained.utility[k]) for k in ("auc/MUTAG", "auc/PTC_MR"))
    # each client received the other dataset's generator: its classes are the other range
    for k, other in ((0, [2, 3]), (1, [0, 1])):
        (msg,) = [
            m for m in trained.transcript.received_by(f"client:{k}") if m.kind == GENERATIVE_MODEL
        ]
        (package,) = msg.payload
        assert package["classes"].tolist() == other


def test_node_level_data_and_defenses_are_refused(federation, data_root):
    ds = load_dataset("Cora", root=data_root)
    nodes = build_federation(ds, make_partition(ds, "louvain", 3, 0))
    with pytest.raises(ConfigError, match="cefgc classifies graphs"):
        TARGETS.get("cefgc").fit(nodes, TOY, [], 0)


def test_dp_sgd_accounts_each_graph_with_its_copies(federation):
    """Each synthetic graph copies one real graph's features, so in the GIN's training a real
    graph is a group of itself and its copies (the ledger once counted it as one record)."""
    dp = applied("dp-sgd", {"clip": 1.0, "noise_multiplier": 1.0, "sample_rate": 0.25})
    cfg = {**TOY, "epochs": 3, "synthetic_ratio": 2.0}
    trained = TARGETS.get("cefgc").fit(federation, cfg, [dp], 0)
    generator, gin = trained.ledger.events
    # its generator (2 epochs) and its GIN (3 epochs, no early stop), 4 steps an epoch each
    assert isinstance(generator, SubsampledGaussian) and isinstance(gin, SubsampledGaussian)
    assert (generator.q, generator.sigma, generator.steps) == (0.25, 1.0, 2 * 4)
    assert gin.steps == 3 * 4 and gin.sigma < 1.0 and gin.q > 0.25
    g = round(1.0 / gin.sigma)
    assert g >= 3  # itself and at least two copies at synthetic_ratio 2
    assert gin.q == pytest.approx(1 - 0.75**g)
    one_record = epsilon(PrivacyLedger((SubsampledGaussian(0.25, 1.0, 5 * 4),)), 1e-5).epsilon
    assert epsilon(trained.ledger, 1e-5).epsilon > 2 * one_record
    assert np.isfinite(trained.utility["auc"])
    assert trained.recipe.defenses == (dp,)  # shadow models are trained the same way
    upload = applied("gaussian-upload", {})
    with pytest.raises(ConfigError, match="only dp-sgd"):
        TARGETS.get("cefgc").fit(federation, TOY, [upload], 0)


def test_removing_a_real_graph_changes_no_more_synthetic_graphs_than_the_group(federation):
    """Under DP-SGD a real graph and its feature copies are one group in the GIN's training.
    With ratio 2.5 the copies were round(2.5 n) cycled over a random order of the n graphs:
    removing one graph reshuffled every copy (which graph, which generator). Now each graph's
    copies are drawn on its own: the others' (features, class) stay, and the removed graph's
    are at most the group the ledger accounts (a synthetic graph's structure is then drawn
    from the same generator given the same features)."""
    cfg = CeFGCConfig(**{**TOY, "synthetic_ratio": 2.5})
    sender = client_generators(
        trainable(federation.clients[1].train, cfg.generator),
        cfg.generator,
        False,
        torch.Generator().manual_seed(0),
    )
    own = trainable(federation.clients[0].train, cfg.generator)
    features = federation.dataset.num_features

    def records(graphs):
        client = replace(federation.clients[0], train=graphs)
        fake = synthesise([sender], client, cfg, features, torch.Generator().manual_seed(1))
        return Counter((g.x.numpy().tobytes(), int(g.y)) for g in fake)

    full, fewer = records(own), records(own[:-1])
    dp = applied("dp-sgd", {"clip": 1.0, "noise_multiplier": 1.0, "sample_rate": 0.25})
    _, gin = TARGETS.get("cefgc").planned_ledger(federation, cfg, [dp]).events
    group = round(1.0 / gin.sigma)
    assert group == 1 + 3  # itself and at most ⌈2.5⌉ copies
    assert not fewer - full  # nothing new
    gone = full - fewer
    assert {x for x, _ in gone} <= {own[-1].x.numpy().tobytes()}  # only its own copies
    assert sum(gone.values()) <= group - 1


def test_copy_plan_gives_the_ratio_in_expectation_over_every_source():
    from fgl_workbench.targets.cefgc.target import copy_plan, max_copies

    plan = copy_plan(4000, 3, 2.5, torch.Generator().manual_seed(0))
    counts = np.array([len(p) for p in plan])
    assert set(counts.tolist()) == {2, 3} and max_copies(2.5) == 3
    assert counts.mean() == pytest.approx(2.5, abs=0.05)
    per_source = np.bincount(np.concatenate(plan), minlength=3) / counts.sum()
    assert np.allclose(per_source, 1 / 3, atol=0.02)
    assert all(len(set(p)) == len(p) for p in plan)  # one graph's copies on distinct sources


def test_dp_sgd_noise_reaches_the_generator(federation):
    """The same generator training with no noise and with overwhelming noise: the noisy one
    is a different model (the noise is applied), the clean one fits its graphs."""
    graphs = trainable(federation.clients[0].train, GeneratorConfig(max_nodes=28))
    cfg = GeneratorConfig(epochs=3, max_nodes=28, channels=(2, 2))
    quiet = DPSGDConfig(clip=1e3, noise_multiplier=1e-6, sample_rate=0.5)
    loud = DPSGDConfig(clip=1.0, noise_multiplier=100.0, sample_rate=0.5)
    nets = [
        train_generator(graphs, cfg, torch.Generator().manual_seed(0), dp=dp)
        for dp in (quiet, loud)
    ]
    adj, x, mask = dense(graphs, 28)
    losses = [
        float(dsm_loss(n, adj, x, mask, cfg.sigmas, torch.Generator().manual_seed(1))) for n in nets
    ]
    assert losses[0] < losses[1]


def test_cefgc_through_the_runner_with_a_membership_attack(data_root, tmp_path):
    suite = {
        "name": "cefgc-mutag",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": "MUTAG"}],
        "partitions": [{"method": "iid", "num_clients": 3, "aux_fraction": 0.2}],
        "targets": [{"name": "cefgc", "params": TOY}],
        "attacks": [
            {"name": "mia-threshold", "params": {"signal": "loss"}},
            {"name": "mia-generator-loss", "params": {"client": 1, "draws": 2}},
            {"name": "generator-sampling", "params": {"client": 1, "samples": 2, "steps": 3}},
        ],
    }
    run_suite(parse_suite(suite), tmp_path, quiet=True)
    store = ResultsStore(tmp_path)
    (cell,) = store.cells()
    assert np.isfinite(cell.utility["auc"])
    rows = {row.attack: row for row in store.attacks()}
    assert set(rows) == {"mia-threshold", "mia-generator-loss", "generator-sampling"}
    for row in rows.values():
        assert row.status == "ok" and 0.0 <= row.metrics["auc"] <= 1.0
    # the sampling attack's threshold marks exact copies: the share of members reproduced
    sampling = rows["generator-sampling"].metrics
    assert 0.0 <= sampling["threshold_tpr"] <= 1.0
    # the attack's own counts are stored beside: copies found among all candidates, and no
    # generator to recover without pairing
    members = sampling["members"] + sampling["nonmembers"]
    assert 0 <= sampling["attack_copies"] <= members
    assert sampling["attack_generators"] == 4.0  # 2 other clients, a generator per class
    assert sampling["attack_recovered"] == 0.0


# CeFGC*+ with generators trained long enough to be told from weight-space mixtures (at 2
# epochs a recovered generator denoised no better than the average it came from)
PAIRED = {
    **TOY,
    "generator": {**TOY["generator"], "epochs": 20},
    "label_channel": True,
    "pairing": True,
}


@pytest.fixture(scope="module")
def paired(federation):
    return TARGETS.get("cefgc").fit(federation, PAIRED, [], 0)


def test_pairing_averages_each_generator_with_its_nearest_under_encryption(federation, paired):
    trained = paired
    kinds = [(m.round, m.kind) for m in trained.transcript.messages]
    assert (0, "public_key") in kinds and (1, "similarities") in kinds and (1, "pairing") in kinds
    ups = [m for m in trained.transcript.messages if m.round == 0 and m.kind == GENERATIVE_MODEL]
    for m in ups:  # what the server holds of a generator is ciphertext
        (sealed,) = m.payload["models"].values()
        assert isinstance(sealed, Ciphertext) and not isinstance(sealed, dict)
    plain = TARGETS.get("cefgc").fit(federation, {**PAIRED, "pairing": False}, [], 0)
    plain_up = [m for m in plain.transcript.messages if m.round == 0 and m.kind == GENERATIVE_MODEL]
    # ciphertexts are what travels, and they are far larger than the float32 weights
    assert ups[0].nbytes > 5 * plain_up[0].nbytes
    weights = [next(iter(m.payload["models"].values())) for m in plain_up]
    pairing = next(m.payload for m in trained.transcript.messages if m.kind == "pairing")
    flat = [torch.cat([v.reshape(-1) for v in w.values()]) for w in weights]
    for i, j in enumerate(pairing.tolist()):
        cos = [float(torch.nn.functional.cosine_similarity(flat[i], flat[o], 0)) for o in range(3)]
        assert j != i and cos[j] == max(c for o, c in enumerate(cos) if o != i)
    assert trained.utility["auc"] > 0.6


def test_a_client_undoes_the_averages_its_own_generator_took_part_in(federation, paired):
    cfg = GeneratorConfig(**PAIRED["generator"])
    features = federation.dataset.num_features
    uploads = [m for m in paired.transcript.messages if m.round == 0 and m.kind == GENERATIVE_MODEL]
    truth = [opened_payloads([m], paired.keys, cfg, features, 1)[0]["models"] for m in uploads]
    truth = [flatten(t[ALL_CLASSES]) for t in truth]
    pairing = next(m.payload for m in paired.transcript.messages if m.kind == "pairing").tolist()
    for k in range(3):
        view = client_view(paired, federation, k)
        received = opened_payloads(view.received, view.keys, cfg, features, 2)
        own = opened_payloads(view.sent, view.keys, cfg, features, 1)
        graphs = trainable(view.local.val + view.local.test, cfg)
        undone, recovered = undo_pairing(received, own, graphs, cfg, 4, 0)
        got = [flatten(p["models"][ALL_CLASSES]) for p in undone]
        exact = {j for j in range(3) if min(np.abs(g - truth[j]).max() for g in got) < 1e-3}
        # exactly the generators whose nearest was this client's own are given away
        assert exact == {j for j, p in enumerate(pairing) if p == k and j != k}
        assert recovered == len(exact)
