"""The population under pseudonyms: what a link adversary is handed, every node renamed by a
permutation the challenge draws (``LinkChallenge.names``). A dataset's own numbering is
structure: −|i − j| of Cora's ids scores its edges at AUC 0.51–0.55 with no view at all, and
TU molecules are numbered along their bonds. The pairs asked about, the answers, the
knowledge and the known edges all reach the attack under the same names, so nothing else it
sees changes."""

from __future__ import annotations

from collections.abc import Callable
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


class Pseudonymous:
    """``api`` asked and answering by pseudonym (``names[i]``: population node i's). Only the
    calls a link attack makes are passed on, each where ``api`` has it (so ``hasattr`` reads
    as on ``api``): answers by node (``logits``, ``embeddings``, ``release_counts``), the
    nodes it answers for (``nodes``) and a feature probe's moved nodes (``influence``). Any
    other call is refused: one not translated would hand population ids over."""

    def __init__(self, api: Any, names: np.ndarray) -> None:
        self.api = api
        self.names = names
        self.ids = np.argsort(names)  # the population id behind each pseudonym

    @property
    def num_nodes(self) -> int:
        return int(self.api.num_nodes)

    def __getattr__(self, name: str) -> Any:
        translate = _CALLS.get(name)
        if translate is None or not hasattr(self.api, name):
            raise AttributeError(f"{name!r}: not answered under pseudonyms")
        return translate(self, getattr(self.api, name))


def _by_id(p: Pseudonymous, call: Callable[..., Any]) -> Callable[..., Any]:
    return lambda node_ids, *rest: call(p.ids[np.asarray(node_ids, dtype=np.int64)], *rest)


def _probe(p: Pseudonymous, call: Callable[..., Any]) -> Callable[..., Any]:
    def influence(node: int, step: float) -> tuple[np.ndarray, torch.Tensor]:
        ids, moved = call(int(p.ids[node]), step)
        names = p.names[ids]
        order = np.argsort(names)  # ascending, as the deployments return theirs
        return names[order], moved[torch.as_tensor(order)]

    return influence


_CALLS: dict[str, Callable[[Pseudonymous, Any], Any]] = {
    "logits": _by_id,
    "embeddings": _by_id,
    "release_counts": _by_id,
    "influence": _probe,
    "nodes": lambda p, nodes: np.sort(p.names[nodes]),
}


def unwrapped(api: Any) -> Any:
    """The API behind pseudonyms: its kind says how it is asked (e.g. with a hop count)."""
    return api.api if isinstance(api, Pseudonymous) else api


def renamed_knowledge(knowledge: BackgroundKnowledge, names: np.ndarray) -> BackgroundKnowledge:
    """``knowledge`` with its node-level ids under ``names``: the graph's feature rows
    reordered and its edges renamed, the auxiliary pool and the known non-edges renamed."""
    assert knowledge.graph is not None
    g = knowledge.graph
    table = torch.as_tensor(names)
    graph = Data(x=g.x[torch.as_tensor(np.argsort(names))], edge_index=table[g.edge_index])
    graph.num_nodes = g.num_nodes
    non = knowledge.known_non_edges
    return replace(
        knowledge,
        aux_ids=names[knowledge.aux_ids],
        graph=graph,
        known_non_edges=None if non is None else names[non],
    )


def pseudonymous(
    view: ServedView | QuerierView | InsiderView,
    knowledge: BackgroundKnowledge,
    names: np.ndarray,
) -> tuple[ServedView | QuerierView | InsiderView, BackgroundKnowledge]:
    """A link adversary's view and knowledge under ``names``."""
    return replace(view, api=Pseudonymous(view.api, names)), renamed_knowledge(knowledge, names)
