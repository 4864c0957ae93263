"""GRAIN's search (Drencheva et al., "GRAIN: Exact Graph Reconstruction from Gradients", ICLR
2025) against the graph-level GIN under FedSGD: the server rebuilds each of client k's
training graphs from k's one-step gradient, knowing their node features.

Why it can work: a linear layer's weight gradient is Σ_i δ_i z_iᵀ over the nodes i, so its
rows are combinations of the layer's input rows z_i. A candidate neighbourhood whose input row
at that layer leaves the gradient's row span cannot be part of the graph. A GIN node's input
row at the MLP of layer d depends on its d-hop computation tree alone (sums, no degree
normalisation), so:

1. **1-hop building blocks**: for every feature type t (a distinct feature row) and every
   multiset of up to ``max_degree`` neighbour types, the centre's rows at layer 1 (the MLP's
   two linear layers' inputs) are checked against the spans; the survivors are t's blocks.
2. **Assembly**: a depth-first search closes one node at a time (the open node with most
   neighbours so far), giving it one of its type's blocks by linking it to open nodes that can
   still take it; nodes of one type with no edge yet are interchangeable, so only the first
   ones are tried. Each time a node's d-hop tree is final (d ≥ 2), its rows at layer d are
   checked against that layer's span; a graph left disconnected is dropped (molecules are
   connected).
3. **Ranking**: the complete graphs are ranked by the full gradient's mismatch (the replay of
   k's step, ``structure_inversion``'s ``objective: update``), the lowest kept.

Departures from the paper: GRAIN attacks GCN/GAT and recovers the features too, from a known
vocabulary; here the target is the workbench's GIN (sum aggregation makes its blocks exact
without degree bookkeeping) and the server is told each graph's node features (the family's
knowledge), so only the edges are searched. The first layer's input (the atom one-hots) is
checked by nothing; the checks start at the GIN MLP's inputs."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fgl_workbench.attacks.reconstruction.structure import labelled_graph, wl_hash
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.models.graph import GIN

# a closed node's layer-2 lookahead tries every choice of its open neighbours' blocks, up to
# this many (on MUTAG's spans a few hundred at most); past it the node waits to be final
LOOKAHEAD_ROWS = 20_000


def gradient_spans(
    sent: dict, upload: dict, recipe: dict, names: list[str], rank_tol: float
) -> dict[str, np.ndarray]:
    """An orthonormal basis [rank, inputs] of the row span of each named weight's gradient,
    read off a FedSGD upload: sent − upload = lr · (∇ + wd · sent), so ∇ ∝ sent − upload −
    lr · wd · sent (a span ignores the scale). Singular values below ``rank_tol`` times the
    largest are dropped: the float32 rounding of the upload sits there."""
    if recipe.get("optimizer", "adam") != "sgd" or int(recipe.get("local_epochs", 1)) != 1:
        raise NotApplicableError(
            "structure-inversion: method 'grain' reads a span off one plain gradient step; "
            "the target's recipe must be FedSGD (optimizer: sgd, local_epochs: 1)"
        )
    lr, wd = float(recipe.get("lr", 0.01)), float(recipe.get("weight_decay", 0.0))
    spans = {}
    for name in names:
        w = sent[name].double()
        grad = (w - upload[name].double() - lr * wd * w).numpy(force=True)
        _, s, vt = np.linalg.svd(grad, full_matrices=False)
        spans[name] = vt[: int((s > rank_tol * s[0]).sum())] if s[0] > 0 else vt[:0]
    return spans


class GinLayers:
    """The GIN's weights as arrays, read on a dense adjacency: per layer d (1-based), the
    input rows of its MLP's two linear layers, each a function of the node's d-hop tree."""

    def __init__(self, model: GIN) -> None:
        def arr(t: torch.Tensor) -> np.ndarray:
            return t.detach().double().numpy(force=True)

        self.project = (arr(model.project.weight), arr(model.project.bias))
        self.convs = [
            (
                float(conv.eps),
                arr(conv.nn[0].weight),
                arr(conv.nn[0].bias),
                arr(conv.nn[2].weight),
                arr(conv.nn[2].bias),
            )
            for conv in model.convs
        ]

    @staticmethod
    def names(depth: int) -> tuple[str, str]:
        """The weights whose inputs layer ``depth`` reads."""
        return f"convs.{depth - 1}.nn.0.weight", f"convs.{depth - 1}.nn.2.weight"

    def rows(self, x: np.ndarray, adjacency: np.ndarray, depth: int) -> list[tuple]:
        """Layers 1..``depth``: (the MLP's first input, its second input) for every node."""
        w, b = self.project
        h = x @ w.T + b
        out = []
        for eps, w0, b0, w2, b2 in self.convs[:depth]:
            z = (1 + eps) * h + adjacency @ h
            u = np.maximum(z @ w0.T + b0, 0.0)
            out.append((z, u))
            h = np.maximum(u @ w2.T + b2, 0.0)
        return out

    def output(self, depth: int, u: np.ndarray) -> np.ndarray:
        """Layer ``depth``'s output rows from its MLP's second input rows."""
        _, _, _, w2, b2 = self.convs[depth - 1]
        return np.maximum(u @ w2.T + b2, 0.0)


def off_span(rows: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Each row's distance from the span, relative to its length (0 for a zero row: it says
    nothing)."""
    rest = rows - (rows @ basis.T) @ basis
    return np.linalg.norm(rest, axis=1) / np.maximum(np.linalg.norm(rows, axis=1), 1e-300)


@dataclass(frozen=True)
class SpanCheck:
    """The span test per layer: ``tolerance[d - 1]`` bounds the relative distance of layer d's
    input rows from its gradient's span."""

    layers: GinLayers
    spans: dict[str, np.ndarray]
    tolerance: tuple[float, ...]

    def distance(self, depth: int, z: np.ndarray) -> np.ndarray:
        """Per aggregated row ``z`` of layer ``depth`` ((1 + ε) h_i + Σ_j h_j), the larger
        distance of its MLP's two inputs from their spans, over the layer's tolerance (≤ 1
        passes)."""
        _, w0, b0, _, _ = self.layers.convs[depth - 1]
        u = np.maximum(z @ w0.T + b0, 0.0)
        first, second = self.layers.names(depth)
        far = np.maximum(off_span(z, self.spans[first]), off_span(u, self.spans[second]))
        return far / self.tolerance[depth - 1]

    def worst(self, x: np.ndarray, adjacency: np.ndarray, nodes: list[np.ndarray]) -> float:
        """The largest ``distance`` of the rows of ``nodes[d - 1]`` at each layer d (0 when
        there are none), computed on the graph as it stands."""
        depth = max((d + 1 for d, idx in enumerate(nodes) if idx.size), default=0)
        out = 0.0
        for d, (z, _) in enumerate(self.layers.rows(x, adjacency, depth), start=1):
            if nodes[d - 1].size:
                out = max(out, float(self.distance(d, z[nodes[d - 1]]).max()))
        return out


def one_hop_blocks(
    check: SpanCheck, kinds: np.ndarray, available: np.ndarray, max_degree: int
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per feature type t (rows of ``kinds``), the neighbour-type counts [blocks, types] whose
    star around a t centre passes layer 1, with no type used more often than the graph holds
    it (``available``, the centre itself not counted); and per type the centre's layer-1
    output row for each block (what its neighbours aggregate at layer 2)."""
    types = len(kinds)
    blocks, outs = [], []
    for t in range(types):
        cap = available - np.eye(types, dtype=int)[t]
        counts = [
            np.bincount(combo, minlength=types)
            for d in range(1, max_degree + 1)
            for combo in itertools.combinations_with_replacement(range(types), d)
        ]
        counts = np.array([c for c in counts if (c <= cap).all()], dtype=int).reshape(-1, types)
        m = len(counts)
        # the m candidate centres first, then one node per type for the leaves to sum
        x = np.concatenate([np.repeat(kinds[t : t + 1], m, 0), kinds])
        adjacency = np.zeros((m + types, m + types))
        adjacency[:m, m:] = counts
        z, u = check.layers.rows(x, adjacency, 1)[0]
        fine = check.distance(1, z[:m]) <= 1.0
        blocks.append(counts[fine])
        outs.append(check.layers.output(1, u[:m][fine]))
    return blocks, outs


@dataclass
class Assembly:
    """How the search over one graph went: the states it visited, the complete graphs it
    reached, whether ``found`` stopped it, and whether it ran out of states first."""

    states: int
    complete: int
    stopped: bool
    cut_short: bool


def assemble(
    x: np.ndarray,
    types: np.ndarray,
    blocks: tuple[list[np.ndarray], list[np.ndarray]],
    check: SpanCheck,
    max_states: int,
    found: Callable[[np.ndarray], bool],
) -> Assembly:
    """The depth-first search of step 2 over one graph's nodes (``types``: each node's row of
    the feature types; ``blocks``: ``one_hop_blocks``); each complete graph (a boolean
    adjacency) goes to ``found``, which says whether to stop. Nodes are closed in
    breadth-first order (next, a node linked to the earliest closed one), so that a closed
    node's neighbours close soon after it; a node's choices are tried nearest the spans
    first (the largest distance any checked row has, over its tolerance). With layer 2
    checked, a closed node is checked before its neighbours close (GRAIN's 2-hop blocks,
    built lazily): some choice among its open neighbours' remaining blocks must put its
    layer-2 rows in the span."""
    blocks, outs = blocks
    n, kinds = len(types), len(blocks)
    unit = np.eye(kinds, dtype=int)
    adjacency = np.zeros((n, n), dtype=bool)
    counts = np.zeros((n, kinds), dtype=int)
    order = np.full(n, n, dtype=int)  # when each node was closed (n: open)
    depth = len(check.tolerance)
    present = np.bincount(types, minlength=kinds)
    start = int(np.flatnonzero(types == np.argmin(np.where(present, present, n + 1)))[0])
    tally = {"states": 0, "complete": 0, "stop": False}
    chosen = np.full(n, -1)  # a closed node's block, as its index among its type's
    eps2 = check.layers.convs[1][0] if depth >= 2 else 0.0

    def closed() -> np.ndarray:
        return order < n

    def takes(w: int, kind: int) -> bool:
        """Whether node w can still get a neighbour of ``kind`` and end in one of its blocks."""
        return bool((blocks[types[w]] >= counts[w] + unit[kind]).all(1).any())

    def final_nodes() -> list[np.ndarray]:
        """Per layer d ≥ 2, the nodes whose d-hop tree is final: closed, as are every
        neighbour's (d − 1)-hop trees; layer 1 is the blocks' own check, so left empty."""
        done, out = closed(), [np.zeros(0, dtype=int)]
        for _ in range(2, depth + 1):
            done = done & ~(adjacency & ~done[None, :]).any(1)
            out.append(np.flatnonzero(done))
        return out

    def choices(v: int, need: np.ndarray) -> list[tuple[int, ...]]:
        """Ways to link v to ``need`` more neighbours of each type among open nodes."""
        per_kind = []
        for kind in np.flatnonzero(need):
            c = int(need[kind])
            pool = [
                w
                for w in np.flatnonzero((types == kind) & ~closed() & ~adjacency[v]).tolist()
                if w != v and takes(w, types[v])
            ]
            touched = [w for w in pool if counts[w].any()]
            fresh = [w for w in pool if not counts[w].any()]
            ways = [
                combo + tuple(fresh[: c - j])
                for j in range(min(c, len(touched)) + 1)
                if c - j <= len(fresh)
                for combo in itertools.combinations(touched, j)
            ]
            if not ways:
                return []
            per_kind.append(ways)
        return [sum(parts, ()) for parts in itertools.product(*per_kind)]

    def frontier() -> float:
        """Over the closed nodes with open neighbours, the largest layer-2 ``distance`` that
        the best choice among their open neighbours' remaining blocks leaves."""
        out = 0.0
        if depth < 2:
            return out
        done = closed()
        for c in np.flatnonzero(done & (adjacency & ~done[None, :]).any(1)):
            links = np.flatnonzero(adjacency[c])
            sums = (1 + eps2) * outs[types[c]][chosen[c]]
            for j in links[done[links]]:
                sums = sums + outs[types[j]][chosen[j]]
            lefts = [
                outs[types[j]][(blocks[types[j]] >= counts[j]).all(1)] for j in links[~done[links]]
            ]
            if np.prod([len(left) for left in lefts]) > LOOKAHEAD_ROWS:
                continue  # too many choices to try (spans that let nearly all through)
            sums = sums[None]
            for left in lefts:
                sums = (sums[:, None, :] + left[None]).reshape(-1, sums.shape[1])
            if not len(sums):
                return np.inf
            out = max(out, float(check.distance(2, sums).min()))
            if out > 1.0:
                return out
        return out

    def next_node(step: int) -> int | None:
        """The open node linked to the earliest closed one; ``start`` first; None when open
        nodes are left that nothing links to (the graph would be disconnected)."""
        if not step:
            return start
        reached = ~closed() & counts.any(1)
        if not reached.any():
            return None
        first = np.where(adjacency[:, reached], order[:, None], n).min(0)
        return int(np.flatnonzero(reached)[np.argmin(first)])

    def close(v: int, k: int, index: int, target: np.ndarray, link: list[int]) -> None:
        """Give v its block ``index`` (neighbour counts ``target``) by linking it to ``link``."""
        adjacency[v, link] = adjacency[link, v] = True
        counts[link, types[v]] += 1
        counts[v], order[v], chosen[v] = target, k, index

    def reopen(v: int, link: list[int]) -> None:
        """Undo ``close``: the links go, and v's counts go back to those from ``link``'s
        nodes' own closing (v's neighbours outside ``link``)."""
        adjacency[v, link] = adjacency[link, v] = False
        counts[link, types[v]] -= 1
        counts[v] = np.bincount(types[adjacency[v]], minlength=kinds)
        order[v], chosen[v] = n, -1

    def step(k: int) -> None:
        if tally["stop"] or tally["states"] >= max_states:
            return
        tally["states"] += 1
        if k == n:
            tally["complete"] += 1
            tally["stop"] = found(adjacency.copy())
            return
        v = next_node(k)
        if v is None:
            return
        children = []  # (how far from the spans, block, its counts, the nodes linked)
        for index, target in enumerate(blocks[types[v]]):
            need = target - counts[v]
            if (need < 0).any():
                continue
            for ws in choices(v, need):
                link = list(ws)
                close(v, k, index, target, link)
                far = frontier()
                if far <= 1.0:
                    far = max(far, check.worst(x, adjacency.astype(float), final_nodes()))
                reopen(v, link)
                if far <= 1.0:
                    children.append((far, index, target, link))
        children.sort(key=lambda child: child[0])  # nearest the spans first
        for _, index, target, link in children:
            close(v, k, index, target, link)
            step(k + 1)
            reopen(v, link)

    step(0)
    stopped = bool(tally["stop"])
    return Assembly(
        tally["states"], tally["complete"], stopped, not stopped and tally["states"] >= max_states
    )


def wl_key(adjacency: np.ndarray, types: np.ndarray, iterations: int) -> str:
    """The Weisfeiler–Lehman hash of a complete graph with its nodes' feature types. A GIN of
    ``iterations`` layers computes the same rows, so the same gradient, on two graphs with
    one key (it is no finer than the 1-WL test): the update cannot tell them apart, so each
    key is ranked once."""
    src, dst = np.nonzero(np.triu(adjacency))
    return wl_hash(labelled_graph(types, src, dst), iterations)


def feature_types(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct feature rows, each node's index among them)."""
    kinds, types = np.unique(x, axis=0, return_inverse=True)
    return kinds, types.reshape(-1)


def best_combination(
    candidates: list[list[np.ndarray]], mismatch: Callable[[list[np.ndarray]], float]
) -> tuple[list[np.ndarray], float]:
    """One complete graph per training graph, the batch's mismatch lowest: each graph's
    candidates tried in turn with the others held at their current choice (two sweeps; with
    one graph, every candidate once); every graph needs at least one candidate."""
    chosen = [c[0] for c in candidates]
    for _ in range(1 if len(candidates) == 1 else 2):
        for g, options in enumerate(candidates):
            losses = [mismatch(chosen[:g] + [a] + chosen[g + 1 :]) for a in options]
            chosen[g] = options[int(np.argmin(losses))]
    return chosen, mismatch(chosen)
