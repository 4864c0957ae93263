import numpy as np
import pytest
import torch

from fgl_workbench.accountants import PrivacyLedger, epsilon, metric_epsilon
from fgl_workbench.attacks import ATTACKS
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.metric_dp import EmbeddingRelease, normalise
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import EMBEDDINGS, PUBLIC, SERVER


def test_normalise_keeps_zero_rows():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(normalise(x), torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "metis", 3, 0))


def fit(federation, sigma0):
    defenses = [applied("metric-dp", {"sigma0": sigma0, "k": 10})]
    return TARGETS.get("fedavg").fit(federation, {"rounds": 10}, defenses, seed=0)


def test_release_is_noisy_unit_vectors_and_recorded(federation):
    trained = fit(federation, 0.05)
    api = trained.query
    assert isinstance(api, EmbeddingRelease) and api.num_nodes == 400
    rows = api.embeddings(np.arange(400))
    assert 0.8 < float(rows.norm(dim=1).median()) < 1.2  # unit norm plus small noise
    torch.testing.assert_close(api.embeddings(np.arange(5), hops=2), rows[:5])  # one release
    sent = [m for m in trained.transcript.messages if m.kind == EMBEDDINGS]
    assert len(sent) == 1 and sent[0].receiver == PUBLIC
    # the publication does not start a new round, so the server keeps the last uploads
    assert any(m.payload is not None for m in trained.transcript.received_by(SERVER))
    u = trained.utility
    assert u["release_probe_accuracy"] > 0.5 and u["release_linkage_rate"] > 0.5
    by_hand = metric_epsilon(0.05, u["metric_rho"], 1, 1e-5).epsilon
    assert epsilon(trained.ledger.metric(), 1e-5, rho=u["metric_rho"]).epsilon == by_hand
    assert trained.ledger.standard() == PrivacyLedger()
    assert all(d.name != "metric-dp" for d in trained.recipe.defenses)


def test_more_noise_less_linkage_and_smaller_epsilon(federation):
    low, high = fit(federation, 0.05).utility, fit(federation, 2.0).utility
    assert high["release_linkage_rate"] < low["release_linkage_rate"]
    assert high["release_linkage_rate"] < 0.2
    assert (
        metric_epsilon(2.0, high["metric_rho"], 1, 1e-5).epsilon
        < metric_epsilon(0.05, low["metric_rho"], 1, 1e-5).epsilon
    )


def test_posterior_attacks_are_not_applicable(federation, querier_input):
    inp, _ = querier_input(federation, fit(federation, 0.5))
    attack = ATTACKS.get("mia-threshold")
    with pytest.raises(NotApplicableError, match="metric-DP"):
        attack.run(inp, attack.Config(), 0)
