"""The link family as the server sees it: recovering client k's graph structure from what k
uploaded (GraphMI, Zhang et al. IJCAI 2021, at node level; gradient matching over the
adjacency, the setting of GRAIN, ICLR 2025, at graph level).

The server is told k's nodes, their features and labels (stated background knowledge, as
GraphMI's adversary) and never k's edges; the challenge asks about pairs of k's nodes and
its scorer alone holds which are edges. Node level: as many of k's non-adjacent pairs as k's
edges (balanced, the link family's intra-client protocol). Graph level: every pair of every
training graph of k, so a graph is recovered exactly when all its pairs are decided right."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch_geometric.data import Data

from fgl_workbench.adversary.candidates import NodePairs
from fgl_workbench.adversary.threat import (
    BackgroundKnowledge,
    ClientNodes,
    background_knowledge,
    curious_client,
    server_view,
)
from fgl_workbench.attacks.base import AttackOutput
from fgl_workbench.attacks.family import CellInputs, FamilyInputs
from fgl_workbench.attacks.metrics import ROC, link_metrics, rate_bounds
from fgl_workbench.data.federation import Federation, GraphClient, NodeClient
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.base import TrainedTarget

DECISION = 0.5  # a relaxed adjacency's entry above it is an edge, unless the attack says


@dataclass(frozen=True)
class StructureChallenge:
    """Pairs of client k's nodes (node level: population ids; graph level: ids into k's
    training graphs laid end to end, in the knowledge's order); for scoring only, which are
    edges and (graph level) which graph each pair lies in."""

    candidates: NodePairs
    is_edge: np.ndarray
    graph_of: np.ndarray | None = None


def upper_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair i < j of ``n`` nodes, in row order (``np.triu_indices``)."""
    i, j = np.triu_indices(n, k=1)
    return i.astype(np.int64), j.astype(np.int64)


def edge_keys(edge_index: np.ndarray, n: int) -> np.ndarray:
    """The undirected edges (no self-loops) as sorted unique keys i * n + j, i < j."""
    lo, hi = np.minimum(*edge_index), np.maximum(*edge_index)
    return np.unique((lo * n + hi)[lo != hi])


def structure_challenge(
    federation: Federation, k: int, seed: int, max_pairs: int = 2000
) -> StructureChallenge:
    c = federation.clients[curious_client(federation, k)]
    rng = np.random.default_rng(seed)
    if isinstance(c, NodeClient):
        n = c.num_nodes
        keys = edge_keys(c.data.edge_index.numpy(force=True), n)
        if keys.size == 0 or keys.size == n * (n - 1) // 2:
            raise NotApplicableError(f"structure inversion: client {k} lacks edges or non-edges")
        edges = rng.permutation(keys)[:max_pairs]
        i, j = upper_pairs(n)
        free = np.setdiff1d(i * n + j, keys, assume_unique=True)
        non = rng.choice(free, min(edges.size, free.size), replace=False)
        pairs = np.concatenate([edges, non])
        is_edge = np.arange(pairs.size) < edges.size
        order = rng.permutation(pairs.size)
        pairs, is_edge = pairs[order], is_edge[order]
        src, dst = pairs // n, pairs % n
        flip = rng.random(pairs.size) < 0.5  # endpoint order carries nothing
        src, dst = np.where(flip, dst, src), np.where(flip, src, dst)
        ids = c.data.global_id.numpy(force=True)
        return StructureChallenge(NodePairs(ids[src], ids[dst]), is_edge)
    assert isinstance(c, GraphClient)
    if not c.train:
        raise NotApplicableError(f"structure inversion: client {k} holds no training graphs")
    srcs, dsts, truth, owner, offset = [], [], [], [], 0
    for g, graph in enumerate(c.train):
        n = graph.num_nodes
        i, j = upper_pairs(n)
        keys = edge_keys(graph.edge_index.numpy(force=True), n)
        srcs.append(i + offset)
        dsts.append(j + offset)
        truth.append(np.isin(i * n + j, keys))
        owner.append(np.full(i.size, g))
        offset += n
    return StructureChallenge(
        NodePairs(np.concatenate(srcs), np.concatenate(dsts)),
        np.concatenate(truth),
        np.concatenate(owner),
    )


def structure_knowledge(
    federation: Federation, trained: TrainedTarget, k: int
) -> BackgroundKnowledge:
    """The server's knowledge: the usual (architecture, recipe, auxiliary pool) with no edge
    of the population graph, and client k's nodes with their features and labels (node
    level: its labelled nodes' labels; graph level: each training graph's label), copied."""
    base = background_knowledge(federation, trained)
    c = federation.clients[curious_client(federation, k)]
    if isinstance(c, GraphClient):
        graphs = tuple(Data(x=g.x.clone(), y=g.y.clone(), num_nodes=g.num_nodes) for g in c.train)
        return replace(base, client_nodes=graphs)
    assert base.graph is not None
    no_edges = torch.zeros(2, 0, dtype=torch.long)
    graph = Data(x=base.graph.x, edge_index=no_edges, num_nodes=base.graph.num_nodes)
    labelled = np.flatnonzero(c.data.train_mask.numpy(force=True))
    nodes = ClientNodes(
        c.data.global_id.numpy(force=True).copy(),
        c.data.x.clone(),
        labelled,
        c.data.y.numpy(force=True)[labelled],
    )
    return replace(base, graph=graph, client_nodes=nodes)


def structure_metrics(out: AttackOutput, task: StructureChallenge) -> tuple[dict[str, Any], ROC]:
    """The link family's metrics over k's pairs (all intra-client) and, at graph level, the
    share of graphs whose every pair the attack decides right (its threshold, else 0.5)."""
    kind = np.full(task.is_edge.size, "intra", dtype=object)
    metrics, curve = link_metrics(out.scores, task.is_edge, kind)
    if task.graph_of is not None:
        cut = DECISION if out.threshold is None else out.threshold
        wrong = (out.scores > cut) != task.is_edge
        graphs = int(task.graph_of.max()) + 1
        exact = int(graphs - np.unique(task.graph_of[wrong]).size)
        lo, hi = rate_bounds(exact, graphs)
        metrics |= {"exact_rate": exact / graphs, "exact_ci_low": lo, "exact_ci_high": hi}
        metrics["graphs"] = float(graphs)
    return metrics, curve


def structure_inputs(config: Any, cell: CellInputs) -> FamilyInputs:
    """The server's view, its knowledge of client ``config.client`` and that client's pairs."""
    k = config.client
    task: StructureChallenge = cell.shared(
        ("structure", k),
        lambda: structure_challenge(cell.federation, k, cell.seeds("structure-challenge")),
    )
    knowledge = structure_knowledge(cell.federation, cell.trained, k)
    view = server_view(cell.trained, cell.federation)
    return FamilyInputs(view, knowledge, task.candidates, lambda out: structure_metrics(out, task))
