"""The population under pseudonyms: what a link adversary is handed, every node renamed by a
permutation the challenge draws (``LinkChallenge.names``). A dataset's own numbering is
structure: −|i − j| of Cora's ids scores its edges at AUC 0.51–0.55 with no view at all, and
TU molecules are numbered along their bonds. The pairs asked about, the answers, the
knowledge and the known edges all reach the attack under the same names, so nothing else it
sees changes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from fgl_workbench.adversary.threat import (
    BackgroundKnowledge,
    InsiderView,
    QuerierView,
    ServedView,
)
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.query import renamed_pairs


def renamed_api(api: Any, names: np.ndarray) -> Any:
    """``api`` rebuilt with node i asked and answering as ``names[i]`` (its own ``renamed``):
    a copy holding no reference to the old numbering, since whatever the attack holds, a
    plug-in's fenced worker holds too (a wrapper over the original handed both over: a
    review, 2026-11-27). An API that cannot be renamed is refused."""
    rename = getattr(api, "renamed", None)
    if rename is None:
        raise NotApplicableError(f"{type(api).__name__}: not answered under pseudonyms")
    return rename(names)


def renamed_knowledge(knowledge: BackgroundKnowledge, names: np.ndarray) -> BackgroundKnowledge:
    """``knowledge`` with its node-level ids under ``names``: the graph's feature rows
    reordered and its edges renamed, the auxiliary pool and the known non-edges renamed."""
    assert knowledge.graph is not None
    g = knowledge.graph
    edges = renamed_pairs(g.edge_index, names)
    graph = Data(x=g.x[torch.as_tensor(np.argsort(names))], edge_index=edges)
    graph.num_nodes = g.num_nodes
    non = knowledge.known_non_edges
    return replace(
        knowledge,
        aux_ids=names[knowledge.aux_ids],
        graph=graph,
        known_non_edges=None if non is None else renamed_pairs(non, names).numpy(),
    )


def pseudonymous(
    view: ServedView | QuerierView | InsiderView,
    knowledge: BackgroundKnowledge,
    names: np.ndarray,
) -> tuple[ServedView | QuerierView | InsiderView, BackgroundKnowledge]:
    """A link adversary's view and knowledge under ``names``."""
    return replace(view, api=renamed_api(view.api, names)), renamed_knowledge(knowledge, names)
