"""Graph reconstruction from embeddings: served embeddings of a homophilous graph give edges
away; embeddings that carry nothing give chance."""

import pytest
import torch

from fgl_workbench.adversary.threat import ServedView, served_view
from fgl_workbench.attacks import ATTACKS
from fgl_workbench.attacks.metrics import link_metrics
from fgl_workbench.attacks.reconstruction.family import link_attack_input, link_knowledge
from fgl_workbench.attacks.reconstruction.graph_reconstruction import GraphReconstructionConfig


def _metrics(setting, view=None, **params):
    federation, trained, challenge = setting
    knowledge = link_knowledge(federation, trained, challenge)
    view = view or served_view(trained, federation)
    cfg = GraphReconstructionConfig(**params)
    inp = link_attack_input(view, knowledge, challenge)
    out = ATTACKS.get("graph-reconstruction").run(inp, cfg, 0)
    return link_metrics(out.scores, challenge.is_edge, challenge.kind)[0]


@pytest.mark.parametrize("decoder", ["inner-product", "trained"])
def test_served_embeddings_give_edges_away(setting, decoder):
    """Against non-edges matched in degree (each node as often in them as in the edges):
    0.61 [0.59, 0.64] over intra-client and cut pairs, 0.56 inside clients (against uniform
    same-client non-edges it read above 0.65 inside clients, part of it the ends' degree)."""
    m = _metrics(setting, decoder=decoder)
    assert m["auc_ci_low"] > 0.55 and m["auc_intra"] > 0.54, m


class NoiseEmbeddings:
    def embeddings(self, node_ids):
        return torch.randn(len(node_ids), 16, generator=torch.Generator().manual_seed(3))

    def renamed(self, names):  # answers that name no node: the same under any names
        return self


@pytest.mark.parametrize("decoder", ["inner-product", "trained"])
def test_embeddings_that_carry_nothing_give_chance(setting, decoder):
    view = ServedView("node", 4, NoiseEmbeddings())
    assert abs(_metrics(setting, view=view, decoder=decoder)["auc_intra"] - 0.5) < 0.07
