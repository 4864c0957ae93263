"""Graph reconstruction from embeddings: served embeddings of a homophilous graph give edges
away; embeddings that carry nothing give chance."""

import pytest
import torch

from fgl_workbench.adversary.threat import ServedView, served_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.metrics import link_metrics
from fgl_workbench.attacks.reconstruction.family import link_knowledge
from fgl_workbench.attacks.reconstruction.graph_reconstruction import GraphReconstructionConfig


def _auc(setting, view=None, **params):
    federation, trained, challenge = setting
    knowledge = link_knowledge(federation, trained, challenge)
    view = view or served_view(trained, federation)
    cfg = GraphReconstructionConfig(**params)
    inp = AttackInput(view, knowledge, challenge.candidates)
    out = ATTACKS.get("graph-reconstruction").run(inp, cfg, 0)
    return link_metrics(out.scores, challenge.is_edge, challenge.kind)[0]["auc_intra"]


@pytest.mark.parametrize("decoder", ["inner-product", "trained"])
def test_served_embeddings_give_edges_away(setting, decoder):
    assert _auc(setting, decoder=decoder) > 0.65


class NoiseEmbeddings:
    def embeddings(self, node_ids):
        return torch.randn(len(node_ids), 16, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("decoder", ["inner-product", "trained"])
def test_embeddings_that_carry_nothing_give_chance(setting, decoder):
    view = ServedView("node", 4, NoiseEmbeddings())
    assert abs(_auc(setting, view=view, decoder=decoder) - 0.5) < 0.07
