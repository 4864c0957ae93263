"""LinkTeller: a feature probe finds the edges inside a client almost perfectly, never a cut
edge, and nothing at all against a model that does not pass messages."""

import numpy as np

from fgl_workbench.adversary.threat import served_view
from fgl_workbench.attacks import ATTACKS
from fgl_workbench.attacks.metrics import link_metrics
from fgl_workbench.attacks.reconstruction.family import link_attack_input, link_knowledge
from fgl_workbench.attacks.reconstruction.link_teller import LinkTellerConfig
from fgl_workbench.models import ModelConfig
from fgl_workbench.targets import TARGETS


def _metrics(federation, trained, challenge):
    """The view holds the deployments' answers to the probes the attack declares (its step,
    at the candidate pairs' first nodes), not the deployments."""
    inp = link_attack_input(
        served_view(trained, federation, challenge.pairs.src, LinkTellerConfig().step),
        link_knowledge(federation, trained, challenge),
        challenge,
    )
    out = ATTACKS.get("link-teller").run(inp, LinkTellerConfig(), 0)
    return link_metrics(out.scores, challenge.is_edge, challenge.kind)[0]


def test_probing_features_finds_intra_client_edges_and_no_cut_edge(setting):
    metrics = _metrics(*setting)
    assert metrics["auc_intra"] > 0.9
    assert metrics["auc_cut"] == 0.5  # another client's nodes never move


def test_a_model_without_message_passing_moves_no_other_node(setting):
    federation, _, challenge = setting
    fedavg = TARGETS.get("fedavg")
    mlp = fedavg.fit(federation, fedavg.Config(rounds=5, model=ModelConfig(arch="mlp")), [], 0)
    assert _metrics(federation, mlp, challenge)["auc"] == 0.5


def test_a_probe_answers_only_for_nodes_that_moved(setting):
    """The querier sees whose posterior changed, not which nodes share the probed client."""
    federation, trained, challenge = setting
    node = int(challenge.pairs.src[0])
    api = served_view(trained, federation, np.array([node]), 0.01).api
    ids, moved = api.influence(node, 0.01)
    owner = next(c for c in federation.clients if node in set(c.data.global_id.tolist()))
    assert 0 < ids.size < owner.num_nodes and bool((moved.norm(dim=1) > 0).all())
