"""Black-box query APIs of a released model: what an external querier can call.

A node query names nodes of the population graph and a neighbourhood size: 0 hops sends the
node alone, k hops sends its k-hop subgraph. Each query is answered on its own subgraph (the
model never sees other queries' nodes); all subgraphs of a batch are stacked as one disjoint
graph, so a batch costs one forward pass."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn
from torch_geometric.data import Batch, Data

from fgl_workbench.errors import NotApplicableError
from fgl_workbench.storable import storable

_NO_NODES = np.zeros(0, dtype=np.int64)


class KHop:
    """A graph's k-hop subgraphs, its sparse adjacency and out-edge lists built once, so a
    batch costs in proportion to the subgraphs it returns, not to the whole graph (a query of
    every node of a million-node graph is a thousand batches)."""

    def __init__(self, edge_index: torch.Tensor, num_nodes: int) -> None:
        self.src, self.dst = edge_index.numpy(force=True)
        self.n = num_nodes
        # boolean: scipy's bool products saturate, where int8 path counts wrapped to 0 and
        # dropped nodes reached by a multiple of 256 paths
        ones = np.ones(self.src.size, dtype=bool)
        self.adj = sp.csr_matrix((ones, (self.src, self.dst)), shape=(num_nodes,) * 2)
        self.order = np.argsort(self.src, kind="stable")  # edges grouped by source
        self.ptr = np.concatenate([[0], np.cumsum(np.bincount(self.src, minlength=num_nodes))])

    def batch(self, centers: np.ndarray, hops: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(global id of every batch node, batch edge_index [2, E'], batch position of each
        center). Reachability is a sparse boolean product; subgraph q keeps the edges whose
        both ends it reaches, so no Python loop runs over queries."""
        n, q = self.n, centers.size
        reach = sp.csr_matrix((np.ones(q, dtype=bool), (np.arange(q), centers)), shape=(q, n))
        for _ in range(hops):
            reach = reach + reach @ self.adj
            reach.data[:] = 1
        reach = reach.tocsr()
        reach.sort_indices()
        rows, cols = reach.nonzero()
        keys = rows.astype(np.int64) * n + cols  # sorted: csr is row-major
        # every out-edge of every reached node, kept where the subgraph reaches its target
        degree = self.ptr[cols + 1] - self.ptr[cols]
        qe = np.repeat(rows.astype(np.int64), degree)
        first = np.repeat(self.ptr[cols] - (np.cumsum(degree) - degree), degree)
        e = self.order[first + np.arange(qe.size)]
        wanted = qe * n + self.dst[e]
        found = np.searchsorted(keys, wanted)
        kept = keys[np.minimum(found, keys.size - 1)] == wanted if keys.size else wanted < 0
        qe, e = qe[kept], e[kept]
        by_edge = np.lexsort((qe, e))  # edge order, then query: the batch's message order
        qe, e = qe[by_edge], e[by_edge]
        b_src = np.searchsorted(keys, qe * n + self.src[e])
        b_dst = np.searchsorted(keys, qe * n + self.dst[e])
        center_pos = np.searchsorted(keys, np.arange(q, dtype=np.int64) * n + centers)
        return cols, np.stack([b_src, b_dst]), center_pos


NOT_ASKED = "the attack did not ask for embeddings (its config's signal: embedding does)"


class NodeAnswers:
    """What node-query deployments share: logits and embeddings by node id at a neighbourhood
    size, and what a querier observes of them (``answers``), from one ``_answer``."""

    _model: nn.Module

    @property
    def num_nodes(self) -> int:
        raise NotImplementedError

    def _answer(self, node_ids: np.ndarray, hops: int, embed: bool) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def logits(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        return self._answer(node_ids, hops, embed=False)

    @torch.no_grad()
    def embeddings(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        return self._answer(node_ids, hops, embed=True)

    def answers(
        self, hops: Sequence[int], known: Data | None, embeddings: bool = True
    ) -> AnswerTable:
        """What a querier observes: this deployment's answers for every node at each of
        ``hops`` (computed on the graph the deployment holds; the querier gets the rows and
        nothing else of the deployment). Embeddings only where the attack reads them: each
        table is a forward pass over every node's neighbourhood."""
        every = np.arange(self.num_nodes)
        logits = {h: self.logits(every, h) for h in hops}
        if not embeddings:
            return AnswerTable(logits, None, self._model, known, NOT_ASKED)
        return AnswerTable(logits, {h: self.embeddings(every, h) for h in hops}, self._model, known)


@storable
class NodeQueryAPI(NodeAnswers):
    def __init__(self, model: nn.Module, graph: Data, chunk: int = 1024) -> None:
        self._model = model
        self._x = graph.x
        self._edge_index = graph.edge_index
        self._num_nodes = int(graph.num_nodes)
        self._chunk = chunk
        self._khop: KHop | None = None  # built on the first query, kept for the next ones

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    def _khop_index(self) -> KHop:
        if self._khop is None:
            self._khop = KHop(self._edge_index, self._num_nodes)
        return self._khop

    def with_features(self, x: torch.Tensor) -> NodeQueryAPI:
        """The same model and graph, queried with features the querier sends itself (e.g. an
        adaptive attacker's own encoding of the nodes)."""
        if tuple(x.shape[:1]) != (self._num_nodes,):
            raise ValueError(
                f"x: expected one row per node ({self._num_nodes}), got {tuple(x.shape)}"
            )
        graph = Data(x=x, edge_index=self._edge_index, num_nodes=self._num_nodes)
        return NodeQueryAPI(self._model, graph, self._chunk)

    def _answer(self, node_ids: np.ndarray, hops: int, embed: bool) -> torch.Tensor:
        node_ids = np.asarray(node_ids, dtype=np.int64)
        if hops < 0:
            raise ValueError(f"hops: must be >= 0 (got {hops})")
        if node_ids.size and (node_ids.min() < 0 or node_ids.max() >= self._num_nodes):
            raise ValueError(f"node_ids: must lie in [0, {self._num_nodes})")
        self._model.eval()
        out = []
        for start in range(0, node_ids.size, self._chunk):
            centers = node_ids[start : start + self._chunk]
            nodes, ei, pos = self._khop_index().batch(centers, hops)
            x, ei_t = self._x[torch.as_tensor(nodes)], torch.as_tensor(ei)
            h = self._model.embed(x, ei_t) if embed else self._model(x, ei_t)
            out.append(h[torch.as_tensor(pos)])
        return torch.cat(out) if out else torch.zeros(0)


class InductiveQueryAPI(NodeAnswers):
    """Olatunji et al.'s deployments of an inductively trained model. A training node is
    answered on the subgraph the training nodes induce (where the model saw it); any other
    node on the population graph (``tstf``: train on subgraph, test on full) or on the
    subgraph the other nodes induce (``tsts``: train and test graphs disjoint). Which graph
    answered shows only in the answers."""

    def __init__(self, model: nn.Module, graph: Data, train_ids: np.ndarray, mode: str) -> None:
        if mode not in ("tstf", "tsts"):
            raise ValueError(f"mode: expected 'tstf' or 'tsts', got {mode!r}")
        self._model = model
        self._mode = mode
        self._train_ids = np.asarray(train_ids, dtype=np.int64)
        self._inside = np.zeros(int(graph.num_nodes), dtype=bool)
        self._inside[self._train_ids] = True
        src, dst = graph.edge_index.numpy(force=True)
        kept = graph.edge_index[:, torch.as_tensor(self._inside[src] == self._inside[dst])]
        apart = Data(x=graph.x, edge_index=kept, num_nodes=graph.num_nodes)
        self._members = NodeQueryAPI(model, apart)  # a k-hop ball there stays inside its side
        self._others = self._members if mode == "tsts" else NodeQueryAPI(model, graph)

    @property
    def num_nodes(self) -> int:
        return int(self._inside.size)

    def _answer(self, node_ids: np.ndarray, hops: int, embed: bool) -> torch.Tensor:
        node_ids = np.asarray(node_ids, dtype=np.int64)
        member = self._inside[node_ids]
        out: torch.Tensor | None = None
        for api, pick in ((self._members, member), (self._others, ~member)):
            if not pick.any():
                continue
            answer = (api.embeddings if embed else api.logits)(node_ids[pick], hops)
            if out is None:
                out = torch.zeros(node_ids.size, answer.shape[1], dtype=answer.dtype)
            out[torch.as_tensor(np.flatnonzero(pick))] = answer
        return out if out is not None else torch.zeros(0)


@dataclass(frozen=True)
class Personalised:
    """A model per client and the client holding each node or graph (population ids; −1:
    none): what an owner-routed deployment answers with, as an adversary holds one of its own."""

    models: dict[int, nn.Module]
    owner: np.ndarray


class OwnerRoutedQueryAPI:
    """Personalised deployments behind one query interface: a node held by client k is
    answered by k's own model (on the population graph, like ``NodeQueryAPI``); a node no
    client holds by the mean of the clients' answers, as no single deployment owns it."""

    def __init__(self, models: dict[int, nn.Module], graph: Data, owner: np.ndarray) -> None:
        self._apis = {k: NodeQueryAPI(m, graph) for k, m in sorted(models.items())}
        self._owner = np.asarray(owner, dtype=np.int64)
        self._num_nodes = int(graph.num_nodes)

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @property
    def owner(self) -> np.ndarray:
        """Node → the client whose model answers it (−1: the clients' mean)."""
        return self._owner.copy()

    @torch.no_grad()
    def logits(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        node_ids = np.asarray(node_ids, dtype=np.int64)
        return routed(
            self._owner[node_ids],
            lambda k, pick: self._apis[k].logits(node_ids[pick], hops),
            sorted(self._apis),
        )

    def answers(
        self, hops: Sequence[int], known: Data | None, embeddings: bool = True
    ) -> AnswerTable:
        """The routed answers for every node at each of ``hops``: the querier sees whose
        model answered only through the answers themselves, never the owner table (and no
        embeddings, asked or not)."""
        logits = {h: self.logits(np.arange(self._num_nodes), h) for h in hops}
        refusal = "personalised deployments answer posteriors, not embeddings"
        return AnswerTable(logits, None, None, known, refusal)


def routed(
    owner: np.ndarray, answer: Callable[[int, np.ndarray], torch.Tensor], clients: Sequence[int]
) -> torch.Tensor:
    """Each query answered by the model of the client holding it (``answer(k, positions)``:
    client k's logits of those queries), one held by no client (owner −1) by the mean of
    every client's answer, as no single deployment owns it."""
    out: torch.Tensor | None = None
    held_by_none = owner < 0
    for k in clients:
        pick = np.flatnonzero((owner == k) | held_by_none)
        if not pick.size:
            continue
        logits = answer(k, pick)
        if out is None:
            out = torch.zeros(owner.size, logits.shape[1])
        share = torch.as_tensor(np.where(held_by_none[pick], 1.0 / len(clients), 1.0))
        out[torch.as_tensor(pick)] += logits * share[:, None].float()
    return out if out is not None else torch.zeros(0)


class AnswerTable:
    """A deployment's answers as its querier observed them: the logits and embeddings of every
    node at the neighbourhood size the attack queries with, computed by the deployment on the
    data it holds. It holds no features and no edges of that data, so an attack reading it
    learns the answers and nothing else. ``model`` and the edges of ``known`` (the graph the
    querier knows, from its background knowledge; its features are not kept) serve a querier
    sending features of its own (``with_features``, the adaptive attacker)."""

    def __init__(
        self,
        logits: dict[int, torch.Tensor] | None,
        embeddings: dict[int, torch.Tensor] | None,
        model: nn.Module | None,
        known: Data | None,
        refusal: str = "",
    ) -> None:
        self._logits = logits
        self._embeddings = embeddings
        self._model = model
        self._known = None if known is None else (known.edge_index, int(known.num_nodes))
        self._refusal = refusal

    @property
    def num_nodes(self) -> int:
        tables = self._logits if self._logits is not None else self._embeddings
        return int(next(iter(tables.values())).shape[0]) if tables else 0

    def logits(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        return table_rows(self._table(self._logits, hops), node_ids)

    def embeddings(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        return table_rows(self._table(self._embeddings, hops), node_ids)

    def renamed(self, names: np.ndarray) -> AnswerTable:
        """The same answers with node i asked as ``names[i]``: rows permuted, the known
        graph's edges renamed; nothing kept of the old numbering."""
        ids = torch.as_tensor(np.argsort(names))
        known = None
        if self._known is not None:
            edge_index, n = self._known
            known = Data(edge_index=renamed_pairs(edge_index, names), num_nodes=n)
        return AnswerTable(
            _rows_of(self._logits, ids), _rows_of(self._embeddings, ids), self._model, known,
            self._refusal,
        )  # fmt: skip

    def with_features(self, x: torch.Tensor) -> NodeQueryAPI:
        """The deployment's model queried with the querier's own features over the graph the
        querier knows."""
        if self._model is None or self._known is None:
            raise NotApplicableError(f"querying with one's own features: {self._refusal}")
        edge_index, num_nodes = self._known
        return NodeQueryAPI(self._model, Data(x=x, edge_index=edge_index, num_nodes=num_nodes))

    def _table(self, tables: dict[int, torch.Tensor] | None, hops: int) -> torch.Tensor:
        if tables is None:
            raise NotApplicableError(self._refusal)
        if hops not in tables:
            raise ValueError(f"hops: the deployment was queried at {sorted(tables)}, not {hops}")
        return tables[hops]


class GraphQueryAPI:
    def __init__(self, model: nn.Module, batch_size: int = 256) -> None:
        self._model = model
        self._batch_size = batch_size

    @torch.no_grad()
    def logits(self, graphs: list[Data]) -> torch.Tensor:
        return self._answer(graphs, embed=False)

    @torch.no_grad()
    def embeddings(self, graphs: list[Data]) -> torch.Tensor:
        return self._answer(graphs, embed=True)

    def _answer(self, graphs: list[Data], embed: bool) -> torch.Tensor:
        self._model.eval()
        out = []
        for start in range(0, len(graphs), self._batch_size):
            b = Batch.from_data_list(graphs[start : start + self._batch_size])
            fn = self._model.embed if embed else self._model
            out.append(fn(b.x, b.edge_index, b.batch))
        return torch.cat(out) if out else torch.zeros(0)


class GraphOwnerRoutedQueryAPI:
    """Personalised graph-level deployments behind one query interface (GCFL's FedAvg, whose
    clients keep their own input and readout layers): a graph held by client k is answered by
    k's own model, one no client holds by the mean of the clients' answers. Graphs are named
    by their population id, as node queries name nodes. ``population`` (graph i has id i) is
    what a querier is answered on: ``answers`` is the table of those answers, so the querier
    learns whose model answered only through them, never the owner table."""

    def __init__(
        self, models: dict[int, nn.Module], owner: np.ndarray, population: Sequence[Data] = ()
    ) -> None:
        if not models:
            raise ValueError("models: a routed deployment needs at least one client's model")
        self._apis = {k: GraphQueryAPI(m) for k, m in sorted(models.items())}
        self._owner = np.asarray(owner, dtype=np.int64)
        self._population = list(population)

    @property
    def owner(self) -> np.ndarray:
        """Graph id → the client whose model answers it (−1: the clients' mean)."""
        return self._owner.copy()

    @torch.no_grad()
    def logits(self, graphs: list[Data], ids: np.ndarray) -> torch.Tensor:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape != (len(graphs),):
            raise ValueError(f"ids: one population id per graph ({len(graphs)}), got {ids.shape}")
        known = (ids >= 0) & (ids < self._owner.size)  # any other id: held by no client
        owner = np.full(ids.size, -1, dtype=np.int64)
        owner[known] = self._owner[ids[known]]

        def answer(k: int, pick: np.ndarray) -> torch.Tensor:
            return self._apis[k].logits([graphs[i] for i in pick])

        return routed(owner, answer, sorted(self._apis))

    def answers(self) -> TableQueryAPI:
        """The routed answers for every graph of the population, by id."""
        if not self._population:
            raise NotApplicableError(
                "a routed deployment without its population answers no querier"
            )
        ids = np.arange(len(self._population))
        return TableQueryAPI(self.logits(self._population, ids))


@storable
class TableQueryAPI:
    """Answers node (or graph) queries by id from logits computed once on the whole
    population, for targets whose inference is itself a privacy mechanism run once (GAP's
    perturbed aggregates) or whose answers depend on who holds the record (routed graph
    deployments): a query's ``hops`` do not change the answer, and repeating it costs nothing."""

    def __init__(self, logits: torch.Tensor) -> None:
        self._logits = logits

    @property
    def num_nodes(self) -> int:
        return int(self._logits.shape[0])

    def logits(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        return table_rows(self._logits, node_ids)

    def renamed(self, names: np.ndarray) -> TableQueryAPI:
        """The same answers with node i asked as ``names[i]``."""
        return TableQueryAPI(self._logits[torch.as_tensor(np.argsort(names))])


def renamed_pairs(pairs: torch.Tensor | np.ndarray, names: np.ndarray) -> torch.Tensor:
    """Node pairs ([2, k]) with node i named ``names[i]``, each from its lower to its higher
    name: pairs listed from the lower to the higher old id would give the old order away
    (Spearman 0.77 on Cora's known edges, a review)."""
    return torch.sort(torch.as_tensor(names)[torch.as_tensor(pairs)], dim=0).values


def _rows_of(
    tables: dict[int, torch.Tensor] | None, ids: torch.Tensor
) -> dict[int, torch.Tensor] | None:
    return None if tables is None else {h: t[ids] for h, t in tables.items()}


def table_rows(table: torch.Tensor, node_ids: np.ndarray) -> torch.Tensor:
    """Rows of a per-node table, with the ids checked."""
    node_ids = np.asarray(node_ids, dtype=np.int64)
    if node_ids.size and (node_ids.min() < 0 or node_ids.max() >= table.shape[0]):
        raise ValueError(f"node_ids: must lie in [0, {table.shape[0]})")
    return table[torch.as_tensor(node_ids)]


class ClientDeployments:
    """The clients' deployments of the released model: each runs it on its own private
    subgraph and answers for its own nodes, by id (He et al.'s link-stealing setting). This
    object holds the clients' data, so it stays with the target; an adversary gets what it
    answered (``observed``)."""

    def __init__(self, model: nn.Module, clients: list[tuple[np.ndarray, Data]], n: int) -> None:
        self._model = model
        self._clients = clients
        self._num_nodes = n

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    @torch.no_grad()
    def observed(self, probed: np.ndarray = _NO_NODES, step: float | None = None) -> ServedAPI:
        """Every served node's posterior and embedding, and, for an adversary who changes a
        node's features by ``step`` (LinkTeller), which answers moved after it changed each
        ``probed`` node, and how far."""
        self._model.eval()
        logits = self._answers(embed=False)
        probes = {}
        if step is not None:
            owner = {int(i): k for k, (ids, _) in enumerate(self._clients) for i in ids}
            for node in np.unique(np.asarray(probed, dtype=np.int64)).tolist():
                probes[node] = self._influence(node, owner.get(node), step, logits)
        return ServedAPI(logits, self._answers(embed=True), probes, step)

    def _influence(
        self, node: int, k: int | None, step: float, logits: torch.Tensor
    ) -> tuple[np.ndarray, torch.Tensor]:
        if k is None:
            return _NO_NODES, torch.zeros(0, logits.shape[1])
        ids, data = self._clients[k]
        x = data.x.clone()
        x[int(np.searchsorted(ids, node))] += step
        before = torch.softmax(logits[torch.as_tensor(ids)], dim=1)
        moved = (torch.softmax(self._model(x, data.edge_index), dim=1) - before) / step
        reached = (moved != 0).any(dim=1)  # what the querier sees change: not the client
        return ids[reached.numpy(force=True)], moved[reached]

    def _answers(self, embed: bool) -> torch.Tensor:
        forward = self._model.embed if embed else self._model
        outs = [(ids, forward(data.x, data.edge_index)) for ids, data in self._clients]
        table = torch.full((self._num_nodes, outs[0][1].shape[1] if outs else 0), float("nan"))
        for ids, out in outs:
            table[torch.as_tensor(ids)] = out
        return table


class ServedAPI:
    """What a querier of the clients' deployments observed: posteriors (logits) and
    embeddings by node id, and the answers to its feature probes. A node no client serves
    answers a row of NaN, the same shape as any other: the deployments refuse unknown ids,
    and which ids they serve is observable (docs/design.md lists it)."""

    def __init__(
        self,
        logits: torch.Tensor,
        embeddings: torch.Tensor,
        probes: dict[int, tuple[np.ndarray, torch.Tensor]],
        step: float | None,
    ) -> None:
        self._logits = logits
        self._embeddings = embeddings
        self._probes = probes
        self._step = step

    @property
    def num_nodes(self) -> int:
        return int(self._logits.shape[0])

    def logits(self, node_ids: np.ndarray) -> torch.Tensor:
        return table_rows(self._logits, node_ids)

    def embeddings(self, node_ids: np.ndarray) -> torch.Tensor:
        """The model's penultimate layer, for deployments that answer with embeddings."""
        return table_rows(self._embeddings, node_ids)

    def renamed(self, names: np.ndarray) -> ServedAPI:
        """The same answers with node i asked as ``names[i]``: tables permuted, each probe
        filed under its node's name with its moved nodes renamed (ascending, as answered)."""
        ids = torch.as_tensor(np.argsort(names))
        probes = {}
        for node, (moved_ids, moved) in self._probes.items():
            order = np.argsort(names[moved_ids])
            probes[int(names[node])] = (names[moved_ids][order], moved[torch.as_tensor(order)])
        return ServedAPI(self._logits[ids], self._embeddings[ids], probes, self._step)

    def influence(self, node: int, step: float) -> tuple[np.ndarray, torch.Tensor]:
        """LinkTeller's probe (Wu et al., S&P 2022): after every feature of ``node`` was raised
        by ``step``, the ids of the nodes whose posterior moved and how far, per unit of
        ``step`` (the rest of the client stays unseen; no ids when no client serves ``node``)."""
        if step != self._step or node not in self._probes:
            raise ValueError(f"node {node}: not probed at step {step} (the attack declares both)")
        return self._probes[node]


def serve(model: nn.Module, clients: Sequence[Any], num_nodes: int) -> ClientDeployments:
    """The deployments of node-level ``clients`` (each with ``data.global_id``)."""
    return ClientDeployments(
        model, [(c.data.global_id.numpy(force=True), c.data) for c in clients], num_nodes
    )


def observed(api: Any, hops: Sequence[int], known: Data | None, embeddings: bool = True) -> Any:
    """What a querier of ``api`` gets: the answers of a deployment that holds node data (its
    embeddings with them where ``embeddings``), or the API itself where it holds none
    (published tables, graph queries the querier fills with graphs of its own)."""
    if isinstance(api, NodeQueryAPI | InductiveQueryAPI | OwnerRoutedQueryAPI):
        return api.answers(hops, known, embeddings)
    if isinstance(api, GraphOwnerRoutedQueryAPI):
        return api.answers()
    return api


QueryAPI = NodeQueryAPI | GraphQueryAPI | TableQueryAPI | AnswerTable
