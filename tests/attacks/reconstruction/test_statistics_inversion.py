"""Reconstruction from uploaded class statistics: a client's labelled nodes come back as their
class means, far closer than the prior; labels come back as an exact multiset; statistics
that carry nothing give the prior."""

import numpy as np
import pytest

from fgl_workbench.adversary.threat import ServerView, client_data_knowledge
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import client_data_challenge
from fgl_workbench.attacks.metrics import (
    label_reconstruction_metrics,
    reconstruction_metrics,
    value_fractions,
)
from fgl_workbench.attacks.reconstruction.statistics_inversion import StatisticsInversionConfig
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.class_statistics import ClassStatistics
from fgl_workbench.transcript import CIPHERTEXT, CLASS_STATISTICS, SERVER, Transcript, client


def _score(setting, view=None, k=0):
    federation, trained, stats_view = setting
    knowledge = client_data_knowledge(federation, trained, k, structure=False)
    cfg = StatisticsInversionConfig(client=k)
    out = ATTACKS.get("statistics-inversion").run(
        AttackInput(view or stats_view, knowledge, np.array([k])), cfg, 0
    )
    task = client_data_challenge(federation, k)
    prior = knowledge.aux_features().numpy().mean(0)
    m, match = reconstruction_metrics(out.scores, task.features, prior, ordered=False)
    labels = value_fractions(knowledge.aux_labels, 3)
    m.update(label_reconstruction_metrics(out.details["labels"][match], task.labels, labels))
    return m


@pytest.mark.parametrize("k", [0, 3])
def test_class_means_reconstruct_a_clients_labelled_nodes(statistics_setting, k):
    m = _score(statistics_setting, k=k)
    assert m["cosine"] > m["cosine_baseline"] + 0.3
    assert m["label_set_accuracy"] > 0.95


def test_a_one_node_class_is_recovered_exactly(statistics_setting):
    federation, trained, view = statistics_setting
    c = federation.clients[0]
    x = c.data.x[c.data.train_mask][:1].double().numpy()
    one = ClassStatistics(np.array([1, 0, 0]), np.pad(x, ((0, 2), (0, 0))), np.zeros((3, 16)), 16)
    transcript = Transcript()
    transcript.send(0, client(0), SERVER, CLASS_STATISTICS, one.as_payload())
    knowledge = client_data_knowledge(federation, trained, 0, structure=False)
    sealed = ServerView("node", 3, 8, transcript.received_by(SERVER), view.spec)
    out = ATTACKS.get("statistics-inversion").run(
        AttackInput(sealed, knowledge, np.array([0])), StatisticsInversionConfig(), 0
    )
    lo = knowledge.aux_features().min(0).values.numpy()
    hi = knowledge.aux_features().max(0).values.numpy()
    assert np.allclose(out.scores[0], np.clip(x[0], lo, hi), atol=1e-6)


def test_uninformative_statistics_give_the_prior(statistics_setting):
    """Every class stated as the population's mean: nothing beyond the prior."""
    federation, trained, view = statistics_setting
    knowledge = client_data_knowledge(federation, trained, 0, structure=False)
    prior = knowledge.aux_features().double().numpy().mean(0)
    means = np.tile(np.concatenate([prior, prior]), (3, 1))
    transcript = Transcript()
    for k in range(8):
        stats = ClassStatistics(np.full(3, 5), means, np.ones((3, 32)), 16)
        transcript.send(0, client(k), SERVER, CLASS_STATISTICS, stats.as_payload())
    blank = ServerView("node", 3, 8, transcript.received_by(SERVER), view.spec)
    m = _score(statistics_setting, view=blank)
    assert m["cosine"] == pytest.approx(m["cosine_baseline"], abs=1e-6)


def test_encrypted_statistics_are_not_applicable(statistics_setting):
    federation, trained, view = statistics_setting
    transcript = Transcript()
    transcript.send(0, client(0), SERVER, CIPHERTEXT, b"sealed")
    sealed = ServerView("node", 3, 8, transcript.received_by(SERVER), view.spec)
    with pytest.raises(NotApplicableError, match="encrypted"):
        _score(statistics_setting, view=sealed)
