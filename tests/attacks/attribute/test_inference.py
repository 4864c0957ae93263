"""Attribute inference: a hidden feature column and the label from the querier's answers,
above the feature baseline; chance when the answers carry nothing; the column is hidden."""

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import (
    QuerierView,
    attribute_knowledge,
    insider_view,
    querier_view,
)
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.attribute.inference import AttributeInferenceConfig, known_values
from fgl_workbench.attacks.challenges import attribute_challenge
from fgl_workbench.attacks.metrics import attribute_metrics
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.errors import ConfigError
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.targets import TARGETS


@pytest.fixture(scope="module")
def setting():
    ds = csbm(CSBMParams(num_nodes=800, homophily=0.8, seed=2))
    federation = build_federation(ds, make_partition(ds, "louvain", 4, 0, aux_fraction=0.2))
    fedavg = TARGETS.get("fedavg")
    return federation, fedavg.fit(federation, fedavg.Config(rounds=40), [], 0)


def _score(setting, view=None, **params):
    federation, trained = setting
    cfg = AttributeInferenceConfig(**params)
    task = attribute_challenge(federation, cfg.attribute, 0)
    knowledge = attribute_knowledge(federation, trained, task.hidden)
    view = view or querier_view(trained, federation)
    out = ATTACKS.get("attribute-inference").run(AttackInput(view, knowledge, task.nodes), cfg, 0)
    known = known_values(knowledge, cfg.attribute)
    prior = np.bincount(known, minlength=task.num_values) / known.size
    return attribute_metrics(out.scores, task.truth, prior)


def test_posteriors_reveal_a_hidden_feature_beyond_the_other_features(setting):
    posterior = _score(setting, attribute="feature:0")
    features = _score(setting, attribute="feature:0", signal="features")
    assert posterior["accuracy"] > features["accuracy"] + 0.05
    assert posterior["accuracy"] > posterior["accuracy_baseline"] + 0.1


def test_the_label_is_inferred_far_above_the_prior(setting):
    metrics = _score(setting)
    assert metrics["accuracy"] > 0.8 > metrics["accuracy_baseline"] + 0.3


class NoiseAPI:
    def logits(self, ids, hops=0):
        return torch.randn(len(ids), 4, generator=torch.Generator().manual_seed(len(ids)))


def test_answers_that_carry_nothing_give_the_baseline(setting):
    metrics = _score(setting, view=QuerierView("node", 4, NoiseAPI()), attribute="feature:0")
    assert abs(metrics["auc"] - 0.5) < 0.06


def test_the_hidden_column_is_known_only_on_the_auxiliary_pool(setting):
    federation, trained = setting
    task = attribute_challenge(federation, "feature:3", 0)
    knowledge = attribute_knowledge(federation, trained, task.hidden)
    x = knowledge.graph.x
    assert torch.all(x[torch.from_numpy(task.nodes), 3] == 0)
    truth = federation.dataset.data.x[torch.from_numpy(knowledge.aux_ids), 3]
    assert torch.equal(x[torch.from_numpy(knowledge.aux_ids), 3], truth)
    assert task.nodes.dtype.kind == "i" and task.nodes.ndim == 1  # bare node ids


def test_bad_attributes_are_named(setting):
    federation, _ = setting
    with pytest.raises(ConfigError, match="feature column 999 does not exist"):
        attribute_challenge(federation, "feature:999", 0)
    raw = {
        "name": "x",
        "datasets": [{"name": "csbm"}],
        "partitions": [{"method": "metis", "num_clients": 2}],
        "targets": [{"name": "fedavg"}],
        "attacks": [{"name": "attribute-inference", "params": {"attribute": "age"}}],
    }
    with pytest.raises(ConfigError, match="attribute"):
        parse_suite(raw)


def test_the_server_reads_labels_from_exchanged_embeddings(exchanged_setting):
    federation, clean, _ = exchanged_setting
    cfg = AttributeInferenceConfig(source="exchanged", signal="embedding")
    view = insider_view(clean, federation, "exchanged")
    task = attribute_challenge(federation, "label", 0, among=view.api.nodes)
    assert np.isin(task.nodes, view.api.nodes).all()
    knowledge = attribute_knowledge(federation, clean, task.hidden)
    out = ATTACKS.get("attribute-inference").run(AttackInput(view, knowledge, task.nodes), cfg, 0)
    prior = np.bincount(knowledge.aux_labels, minlength=task.num_values) / knowledge.aux_ids.size
    metrics = attribute_metrics(out.scores, task.truth, prior)
    assert metrics["accuracy"] > metrics["accuracy_baseline"] + 0.3
    with pytest.raises(ValueError, match="carries embeddings, not posteriors"):
        AttributeInferenceConfig(source="exchanged")
