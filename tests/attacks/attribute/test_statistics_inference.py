"""Attribute inference and label distributions from uploaded class statistics: the pooled
class statistics classify nodes and predict a hidden feature well above the prior; the
counts are each client's label histogram; statistics that carry nothing give the prior."""

import numpy as np
import pytest

from fgl_workbench.adversary.threat import ServerView, attribute_knowledge, background_knowledge
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.attribute.inference import known_values
from fgl_workbench.attacks.attribute.statistics_inference import StatisticsAttributeConfig
from fgl_workbench.attacks.attribute.uploaded_distribution import UploadedDistributionConfig
from fgl_workbench.attacks.challenges import attribute_challenge, label_distribution_challenge
from fgl_workbench.attacks.metrics import attribute_metrics, distribution_metrics, value_fractions
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.class_statistics import ClassStatistics
from fgl_workbench.transcript import CLASS_STATISTICS, RELIABILITY, SERVER, Transcript, client


def _attribute(setting, attribute, view=None):
    federation, trained, stats_view = setting
    task = attribute_challenge(federation, attribute, 0)
    knowledge = attribute_knowledge(federation, trained, task.hidden)
    cfg = StatisticsAttributeConfig(attribute=attribute)
    inp = AttackInput(view or stats_view, knowledge, task.nodes)
    out = ATTACKS.get("statistics-attribute-inference").run(inp, cfg, 0)
    prior = value_fractions(known_values(knowledge, attribute), task.num_values)
    return attribute_metrics(out.scores, task.truth, prior)


def test_pooled_statistics_classify_the_clients_nodes(statistics_setting):
    m = _attribute(statistics_setting, "label")
    assert m["accuracy"] > m["accuracy_baseline"] + 0.3


def test_pooled_statistics_reveal_a_hidden_feature(statistics_setting):
    m = _attribute(statistics_setting, "feature:3")
    assert m["auc"] > 0.65


def test_statistics_that_carry_nothing_give_chance(statistics_setting):
    federation, trained, view = statistics_setting
    transcript = Transcript()
    for k in range(8):
        stats = ClassStatistics(np.full(3, 5), np.zeros((3, 32)), np.ones((3, 32)), 16)
        transcript.send(0, client(k), SERVER, CLASS_STATISTICS, stats.as_payload())
    blank = ServerView("node", 3, 8, transcript.received_by(SERVER), view.spec)
    m = _attribute(statistics_setting, "feature:3", view=blank)
    assert abs(m["auc"] - 0.5) < 1e-9  # every node gets the same score


def _distribution(setting, view, reads="class-counts"):
    federation, trained, _ = setting
    truth = label_distribution_challenge(federation)
    knowledge = background_knowledge(federation, trained)
    out = ATTACKS.get("uploaded-label-distribution").run(
        AttackInput(view, knowledge, truth.clients), UploadedDistributionConfig(reads=reads), 0
    )
    return distribution_metrics(out.scores, truth.truth, value_fractions(knowledge.aux_labels, 3))


def test_class_counts_are_the_label_histogram(statistics_setting):
    m = _distribution(statistics_setting, statistics_setting[2])
    assert m["tv_mean"] < 0.1 < m["tv_baseline"]
    assert m["dominant_accuracy"] == 1.0


def test_a_reliability_vector_is_read_as_a_histogram(statistics_setting):
    federation, _, view = statistics_setting
    truth = label_distribution_challenge(federation)
    transcript = Transcript()
    for k, row in enumerate(truth.truth):  # a reliability-like vector: counts times similarity
        transcript.send(0, client(k), SERVER, RELIABILITY, row * 30 * np.array([0.8, 0.7, 0.9]))
    seen = ServerView("node", 3, 8, transcript.received_by(SERVER), view.spec)
    m = _distribution(statistics_setting, seen, reads="reliability")
    assert m["tv_mean"] < 0.1


def test_no_upload_is_not_applicable(statistics_setting):
    view = ServerView("node", 3, 8, (), statistics_setting[2].spec)
    with pytest.raises(NotApplicableError, match="class-counts"):
        _distribution(statistics_setting, view)
