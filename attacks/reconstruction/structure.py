"""The link family as the server sees it: recovering client k's graph structure from what k
uploaded (GraphMI, Zhang et al. IJCAI 2021, at node level; gradient matching over the
adjacency, the setting of GRAIN, ICLR 2025, at graph level).

The server is told k's nodes, their features and labels (stated background knowledge, as
GraphMI's adversary) and never k's edges; the challenge asks about pairs of k's nodes and
its scorer alone holds which are edges. The pair list must say nothing by itself, so:

- k's nodes reach the server in an order the challenge draws (at graph level within each
  graph), and pairs name them by that order; the scorer keeps the permutation. A dataset's
  own order is structure: TU molecules are numbered along their bonds (−|i − j| alone scored
  MUTAG's bonds at AUC 0.88).
- the pairs are drawn without looking at the graph: every pair of k's nodes (node level, past
  ``max_pairs`` a uniform sample of them; graph level every pair of every training graph). A
  list of k's edges beside as many drawn non-edges shows each node's degree in how often it
  occurs, and the edges' triangles in the list's own common neighbours (AUC 0.65–0.79 on a
  Cora client with no view); non-edges matched in degree would hide the first, not the second.
  Edges are then rare among the pairs (about 1 % on a Cora client): the AUC reads the same,
  average precision against that share."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
import numpy as np
import torch
from sklearn.metrics import roc_auc_score
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
from fgl_workbench.attacks.metrics import ROC, auc_interval, link_metrics, rate_bounds
from fgl_workbench.data.federation import Federation, GraphClient, NodeClient
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.base import TrainedTarget

DECISION = 0.5  # a relaxed adjacency's entry above it is an edge, unless the attack says
MAX_PAIRS = 100_000  # node level: every pair of a client of up to 447 nodes


@dataclass(frozen=True)
class StructureChallenge:
    """Pairs of client k's nodes, named by their rows in the order the challenge shuffled them
    to (graph level: k's training graphs laid end to end, each graph's nodes shuffled within
    it). For the scorer only: which pairs are edges, which graph each lies in, and ``rows``:
    the client's own row behind each shuffled row (node level: its local index; graph level:
    its index into the training graphs laid end to end in their own order)."""

    candidates: NodePairs
    is_edge: np.ndarray
    rows: np.ndarray
    graph_of: np.ndarray | None = None
    # graph level: each shuffled row's feature type (an index among the distinct feature
    # rows), for exact recovery up to a relabelling that keeps features; and per graph
    # whether the no-view guess from a molecule database is right (``lookup_guess``)
    kinds: np.ndarray | None = None
    lookup: np.ndarray | None = None


def upper_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair i < j of ``n`` nodes, in row order (``np.triu_indices``)."""
    i, j = np.triu_indices(n, k=1)
    return i.astype(np.int64), j.astype(np.int64)


def some_pairs(n: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Every pair i < j of ``n`` nodes, or past ``count`` of them a uniform sample of
    ``count``, in row order; the sample is drawn as positions in that order, so memory grows
    with ``count``, not with n²."""
    total = n * (n - 1) // 2
    if total <= count:
        return upper_pairs(n)
    t = np.sort(rng.choice(total, count, replace=False))
    first = np.arange(n, dtype=np.int64)
    first = first * (2 * n - first - 1) // 2  # position of the pair (i, i + 1)
    i = np.searchsorted(first, t, side="right") - 1
    return i, t - first[i] + i + 1


def edge_keys(edge_index: np.ndarray, n: int) -> np.ndarray:
    """The undirected edges (no self-loops) as sorted unique keys i * n + j, i < j."""
    lo, hi = np.minimum(*edge_index), np.maximum(*edge_index)
    return np.unique((lo * n + hi)[lo != hi])


def linked(keys: np.ndarray, a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Whether each pair (a, b) is among the edges' ``keys``."""
    return np.isin(np.minimum(a, b) * n + np.maximum(a, b), keys)


def structure_challenge(
    federation: Federation, k: int, seed: int, max_pairs: int = MAX_PAIRS
) -> StructureChallenge:
    c = federation.clients[curious_client(federation, k)]
    rng = np.random.default_rng(seed)
    if isinstance(c, NodeClient):
        n = c.num_nodes
        rows = rng.permutation(n)
        i, j = some_pairs(n, max_pairs, rng)
        is_edge = linked(edge_keys(c.data.edge_index.numpy(force=True), n), rows[i], rows[j], n)
        if is_edge.all() or not is_edge.any():
            raise NotApplicableError(
                f"structure inversion: client {k}'s pairs asked about lack edges or non-edges"
            )
        return StructureChallenge(NodePairs(i, j), is_edge, rows)
    assert isinstance(c, GraphClient)
    if not c.train:
        raise NotApplicableError(f"structure inversion: client {k} holds no training graphs")
    srcs, dsts, truth, owner, rows, kinds, offset = [], [], [], [], [], [], 0
    for g, graph in enumerate(c.train):
        n = graph.num_nodes
        order = rng.permutation(n)
        i, j = upper_pairs(n)
        keys = edge_keys(graph.edge_index.numpy(force=True), n)
        srcs.append(i + offset)
        dsts.append(j + offset)
        truth.append(linked(keys, order[i], order[j], n))
        owner.append(np.full(i.size, g))
        rows.append(order + offset)
        kinds.append(graph.x[torch.as_tensor(order)].numpy(force=True))
        offset += n
    _, kind = np.unique(np.concatenate(kinds), axis=0, return_inverse=True)
    others = [h for d in federation.clients if d is not c for h in d.train + d.val + d.test]
    return StructureChallenge(
        NodePairs(np.concatenate(srcs), np.concatenate(dsts)),
        np.concatenate(truth),
        np.concatenate(rows),
        np.concatenate(owner),
        kind.reshape(-1),
        np.array([lookup_guess(graph, others) for graph in c.train]),
    )


def structure_knowledge(
    federation: Federation, trained: TrainedTarget, k: int, task: StructureChallenge
) -> BackgroundKnowledge:
    """The server's knowledge: the usual (architecture, recipe, auxiliary pool) with no
    population graph (its feature rows would give k's population ids, and those ids' order,
    back), and client k's nodes in the challenge's order (``task.rows``) with their features
    and labels (node level: its labelled nodes' labels; graph level: each training graph's
    label), copied."""
    if getattr(federation.dataset, "structural_features", False):
        raise NotApplicableError(
            f"structure inversion on {federation.dataset.name}: its node features are one-hot "
            "degrees (it ships none), so the server told the features is told the degrees it "
            "is asked to recover (a degree-product scorer reads AUC 0.74 on IMDB-BINARY)"
        )
    base = background_knowledge(federation, trained)
    c = federation.clients[curious_client(federation, k)]
    if isinstance(c, GraphClient):
        graphs, offset = [], 0
        for g in c.train:
            order = torch.as_tensor(task.rows[offset : offset + g.num_nodes] - offset)
            graphs.append(Data(x=g.x[order].clone(), y=g.y.clone(), num_nodes=g.num_nodes))
            offset += g.num_nodes
        return replace(base, client_nodes=tuple(graphs))
    rows = torch.as_tensor(task.rows)
    labelled = np.flatnonzero(c.data.train_mask[rows].numpy(force=True))
    nodes = ClientNodes(
        c.data.x[rows].clone(), labelled, c.data.y[rows].numpy(force=True)[labelled]
    )
    return replace(base, graph=None, client_nodes=nodes)


def structure_metrics(out: AttackOutput, task: StructureChallenge) -> tuple[dict[str, Any], ROC]:
    """The link family's metrics over k's pairs (all intra-client) and, at graph level, the
    share of graphs whose every pair the attack decides right (its threshold, else 0.5),
    each beside what a guess with no view gets (``graph_chance``).

    Also at graph level: ``exact_iso_rate``, the share of graphs recovered up to a
    relabelling that keeps every node's features (GRAIN's exact match). An upload is the
    same for every such relabelling, so two carbons the server is told about cannot be told
    apart; ``exact_rate`` asks for the labelled graph, so it is at most this.
    ``exact_wl_rate``: the share decided alike to the graph for the 1-WL test (at least
    ``exact_iso_rate``): a GIN computes the same on such graphs, so its upload cannot tell
    them apart. ``edge_f1`` reads the decided pairs as labelled."""
    kind = np.full(task.is_edge.size, "intra", dtype=object)
    metrics, curve = link_metrics(out.scores, task.is_edge, kind)
    if task.graph_of is not None:
        cut = DECISION if out.threshold is None else out.threshold
        decided = out.scores > cut
        wrong = decided != task.is_edge
        graphs = int(task.graph_of.max()) + 1
        exact = int(graphs - np.unique(task.graph_of[wrong]).size)
        lo, hi = rate_bounds(exact, graphs)
        metrics |= {"exact_rate": exact / graphs, "exact_ci_low": lo, "exact_ci_high": hi}
        hits = (decided & task.is_edge).sum()
        metrics["edge_f1"] = float(2 * hits / max(decided.sum() + task.is_edge.sum(), 1))
        if task.kinds is not None:
            pairs = [graph_pair(task, g, decided) for g in range(graphs)]
            iso = sum(nx.is_isomorphic(*p, node_match=same_kind) for p in pairs)
            wl = sum(len({wl_hash(h) for h in p}) == 1 for p in pairs)
            for name, hits in (("exact_iso", iso), ("exact_wl", wl)):
                lo, hi = rate_bounds(hits, graphs)
                metrics |= {f"{name}_rate": hits / graphs, f"{name}_ci_low": lo}
                metrics[f"{name}_ci_high"] = hi
        metrics |= graph_chance(task) | {"graphs": float(graphs)}
    return metrics, curve


def labelled_graph(kinds: np.ndarray, src: np.ndarray, dst: np.ndarray) -> nx.Graph:
    """The graph on rows 0..len(kinds) − 1, each node carrying its feature type."""
    graph = nx.Graph()
    graph.add_nodes_from((i, {"kind": int(k)}) for i, k in enumerate(kinds))
    graph.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
    return graph


def same_kind(a: dict, b: dict) -> bool:
    return a["kind"] == b["kind"]


def wl_hash(graph: nx.Graph, iterations: int | None = None) -> str:
    """The 1-WL colouring's hash over its nodes' feature types, after ``iterations`` rounds
    (a GIN of that depth computes the same rows on graphs with one hash) or, by default, as
    many as nodes: the stable colouring, alike to every GIN whatever its depth."""
    rounds = graph.number_of_nodes() if iterations is None else iterations
    return nx.weisfeiler_lehman_graph_hash(graph, node_attr="kind", iterations=rounds)


def graph_pair(task: StructureChallenge, g: int, decided: np.ndarray) -> tuple[nx.Graph, ...]:
    """(graph g as it is, as decided), each node with its feature type."""
    assert task.graph_of is not None and task.kinds is not None
    at = task.graph_of == g
    src, dst = task.candidates.src[at], task.candidates.dst[at]
    first = int(src.min())
    kinds = task.kinds[first : int(dst.max()) + 1]
    src, dst = src - first, dst - first
    truth = labelled_graph(kinds, src[task.is_edge[at]], dst[task.is_edge[at]])
    return truth, labelled_graph(kinds, src[decided[at]], dst[decided[at]])


def as_labelled(graph: Data) -> nx.Graph:
    """A dataset graph with each node's feature row (as bytes) for its type."""
    rows = graph.x.numpy(force=True)
    out = nx.Graph()
    out.add_nodes_from((i, {"kind": rows[i].tobytes()}) for i in range(graph.num_nodes))
    edges = graph.edge_index.numpy(force=True)
    out.add_edges_from((int(a), int(b)) for a, b in edges.T if a != b)
    return out


def lookup_guess(graph: Data, database: list[Data]) -> bool:
    """The no-view guess with a molecule database: among the database's graphs with the same
    multiset of node features, the most common graph (up to a relabelling that keeps
    features; ties to the first seen). Whether it is ``graph`` (False when none matches)."""

    def composition(g: Data) -> list[bytes]:
        return sorted(r.tobytes() for r in g.x.numpy(force=True))

    mine = composition(graph)
    classes: list[list[nx.Graph]] = []
    for other in database:
        if composition(other) != mine:
            continue
        h = as_labelled(other)
        for members in classes:
            if nx.is_isomorphic(members[0], h, node_match=same_kind):
                members.append(h)
                break
        else:
            classes.append([h])
    if not classes:
        return False
    guess = max(classes, key=len)[0]
    return nx.is_isomorphic(guess, as_labelled(graph), node_match=same_kind)


def graph_chance(task: StructureChallenge) -> dict[str, float]:
    """What the server gets with no view, from the graphs' sizes alone (all it knows besides
    the atoms, whose order the challenge shuffled). ``chance_auc``: each pair scored by
    1 / its graph's size (a small molecule's pairs are more often bonds), with its bootstrap
    interval. ``exact_chance``: the share of graphs the guess "no edges" gets exactly right,
    with its Clopper–Pearson interval; any fixed guess of a labelled graph does no better
    than 1 in the number of its relabellings apart from automorphisms."""
    assert task.graph_of is not None
    sizes = np.bincount(task.graph_of)
    prior = 1.0 / sizes[task.graph_of]
    lo, hi = auc_interval(prior, task.is_edge)
    auc = float(roc_auc_score(task.is_edge, prior))
    graphs = sizes.size
    empty = graphs - np.unique(task.graph_of[task.is_edge]).size
    e_lo, e_hi = rate_bounds(int(empty), graphs)
    out = {
        "chance_auc": auc,
        "chance_auc_ci_low": lo,
        "chance_auc_ci_high": hi,
        "exact_chance": empty / graphs,
        "exact_chance_ci_low": e_lo,
        "exact_chance_ci_high": e_hi,
    }
    if task.lookup is not None:
        hits = int(task.lookup.sum())
        l_lo, l_hi = rate_bounds(hits, graphs)
        out |= {"exact_lookup": hits / graphs, "exact_lookup_ci_low": l_lo}
        out["exact_lookup_ci_high"] = l_hi
    return out


def structure_inputs(config: Any, cell: CellInputs) -> FamilyInputs:
    """The server's view, its knowledge of client ``config.client`` (in the challenge's node
    order) and that client's pairs."""
    k = config.client
    task: StructureChallenge = cell.shared(
        ("structure", k),
        lambda: structure_challenge(cell.federation, k, cell.seeds("structure-challenge")),
    )
    knowledge = structure_knowledge(cell.federation, cell.trained, k, task)
    view = server_view(cell.trained, cell.federation)
    return FamilyInputs(view, knowledge, task.candidates, lambda out: structure_metrics(out, task))
