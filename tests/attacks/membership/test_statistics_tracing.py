"""Membership tracing from released class means, against O-pFGL: per-client uploads and the
masked aggregate give members away, CKKS hides everything from the server while a client
decrypts the aggregate; the attack reads its view and the auxiliary pool only."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fgl_workbench.adversary.threat import background_knowledge, client_view, server_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import membership_challenge, others_records
from fgl_workbench.attacks.membership.statistics_tracing import StatisticsTracingConfig
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses.base import applied
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore
from fgl_workbench.targets import TARGETS

FAST = {
    "surrogate": {"iterations": 60},
    "stage1": {"epochs": 30, "eval_every": 10, "patience": 2, "lr": 0.01},
    "stage2": {"epochs": 30, "eval_every": 10, "patience": 2, "lr": 0.005},
    "mode": "stage1",
    "expansion": {"enabled": False},  # statistics of members only
}


@pytest.fixture(scope="module")
def federation(small_csbm):
    part = make_partition(small_csbm, "louvain", 4, seed=0, aux_fraction=0.3, split=(0.1, 0.2, 0.7))
    return build_federation(small_csbm, part)


def attack(federation, defenses=(), adversary="server", **params):
    trained = TARGETS.get("opfgl").fit(federation, FAST, [applied(n, p) for n, p in defenses], 0)
    challenge = membership_challenge(federation, 0)
    if adversary == "server":
        view = server_view(trained, federation)
    else:
        view = client_view(trained, federation, 0)
        challenge = others_records(challenge, 0)
    inp = AttackInput(view, background_knowledge(federation, trained), challenge.candidates)
    cfg = StatisticsTracingConfig(adversary=adversary, **params)
    out = ATTACKS.get("mia-statistics-tracing").run(inp, cfg, 0)
    return roc_auc_score(challenge.is_member, out.scores), out, inp, cfg, challenge


def test_per_client_uploads_and_the_masked_aggregate_give_members_away(federation):
    clear, out, inp, cfg, challenge = attack(federation)
    masked, masked_out, *_ = attack(federation, [("masked-aggregation", {})])
    assert clear > 0.7 and masked > 0.6
    assert set(out.details["per_model"]) == {f"client:{k}" for k in range(4)}
    assert masked_out.details["counts"]["releases"] == 1  # the pooled sums alone
    # the candidates' order carries nothing: shuffled candidates, shuffled scores
    order = np.random.default_rng(1).permutation(len(inp.candidates.ids))
    c = inp.candidates
    shuffled = type(c)(c.level, c.ids[order], c.labels[order], c.graphs)
    again = ATTACKS.get("mia-statistics-tracing").run(
        AttackInput(inp.view, inp.knowledge, shuffled), cfg, 0
    )
    np.testing.assert_allclose(again.scores, out.scores[order])


# 44 s of CKKS; FedAvg's secure aggregation hiding uploads stays default (test_all_rounds.py)
@pytest.mark.slow
def test_ckks_hides_the_uploads_from_the_server_but_not_the_aggregate_from_clients(federation):
    with pytest.raises(NotApplicableError, match="encrypted"):
        attack(federation, [("secure-aggregation", {})])
    auc, out, *_ = attack(federation, [("secure-aggregation", {})], adversary="client")
    assert out.details["counts"]["releases"] == 1 and auc > 0.5
    surrogate, *_ = attack(federation, adversary="client")
    assert surrogate > 0.5


def test_tracing_and_statistics_attacks_on_opfgl_over_cora_end_to_end(tmp_path, data_root):
    """Real data through the runner: O-pFGL (reduced budgets) on Cora with the statistics
    attacks a curious server runs; every one is scored."""
    raw = {
        "name": "opfgl-cora",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": "Cora"}],
        "partitions": [{"method": "louvain-plus", "num_clients": 5, "aux_fraction": 0.2}],
        "targets": [{"name": "opfgl", "params": {**FAST, "mode": "opfgl"}}],
        "attacks": [
            {"name": "mia-statistics-tracing"},
            {"name": "mia-statistics-tracing", "params": {"adversary": "client"}},
            {"name": "uploaded-label-distribution"},
            {"name": "statistics-inversion"},
            {"name": "mia-threshold"},
        ],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True, data_root=data_root)
    store = ResultsStore(tmp_path)
    (cell,) = store.cells()
    assert cell.utility["accuracy"] > 0.3 and cell.utility["surrogate_nodes"] == 7.0
    rows = store.attacks()
    assert len(rows) == 5 and all(r.status == "ok" for r in rows), [
        (r.attack, r.reason) for r in rows
    ]
    server = next(r for r in rows if r.attack == "mia-statistics-tracing" and not r.params)
    assert server.metrics["auc"] > 0.6


def test_a_fedavg_clients_decrypted_aggregate_is_not_read_as_class_statistics(federation):
    """FedAvg's clients hold the CKKS key too, but its aggregate decrypts to model weights:
    read as class statistics they would give meaningless scores, so the client is refused."""
    config = {"rounds": 2, "local_epochs": 1}
    defenses = [applied("secure-aggregation", {})]
    trained = TARGETS.get("fedavg").fit(federation, config, defenses, 0)
    view = client_view(trained, federation, 0)
    assert view.keys is not None  # the client could decrypt: the attack must still refuse
    challenge = others_records(membership_challenge(federation, 0), 0)
    inp = AttackInput(view, background_knowledge(federation, trained), challenge.candidates)
    with pytest.raises(NotApplicableError, match="surrogate graph or pooled statistics"):
        ATTACKS.get("mia-statistics-tracing").run(
            inp, StatisticsTracingConfig(adversary="client"), 0
        )
