"""Adaptive attackers: adversaries who know a defense's recipe and undo what they can of it.

Evaluating a transform-style defense only against attackers who ignore it measures the
feature-space mismatch, not the defense (FedGC's own caveat)."""

from __future__ import annotations

from dataclasses import replace

import torch

from fgl_workbench.adversary.threat import BackgroundKnowledge, QuerierView
from fgl_workbench.attacks.base import AttackInput
from fgl_workbench.defenses.information_bottleneck import surrogate_features
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.seeding import derive_seed

IB = "information-bottleneck"


def ib_surrogate_features(knowledge: BackgroundKnowledge, attack: str, seed: int) -> torch.Tensor:
    """z′ for every population node, from the attacker's own IB encoder trained with the
    target's recipe (γ, epochs, the head's public seed) on its labelled auxiliary nodes."""
    ib = next((d.config for d in knowledge.recipe.defenses if d.name == IB), None)
    if ib is None:
        raise NotApplicableError(
            f"{attack}: features 'ib-surrogate' needs a target trained with information-bottleneck"
        )
    if knowledge.graph is None or knowledge.aux_ids.size < 2:
        raise NotApplicableError(
            f"{attack}: features 'ib-surrogate' needs node-level data and an auxiliary pool"
        )
    num_classes = int(knowledge.spec.num_classes)
    return surrogate_features(
        knowledge.graph,
        knowledge.aux_ids,
        knowledge.aux_labels,
        ib,
        num_classes,
        derive_seed(seed, "ib-surrogate"),
    )


def adaptive_input(inp: AttackInput, features: str, attack: str, seed: int) -> AttackInput:
    """The input as the adversary works with it. ``raw``: unchanged. ``ib-surrogate``: every
    population node carries the attacker's own encoding z′, so the target is queried, and
    shadow and reference models are trained and queried, in the Z space; their recipe drops
    the IB (the data is encoded already)."""
    if features == "raw":
        return inp
    z = ib_surrogate_features(inp.knowledge, attack, seed)
    know = inp.knowledge
    graph = know.graph.clone()
    graph.x = z
    recipe = replace(know.recipe, defenses=tuple(d for d in know.recipe.defenses if d.name != IB))
    view = inp.view
    if isinstance(view, QuerierView):
        view = replace(view, api=view.api.with_features(z))
    return replace(inp, view=view, knowledge=replace(know, graph=graph, recipe=recipe))
