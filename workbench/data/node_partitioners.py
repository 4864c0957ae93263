"""Node-level partitioners: Louvain and Leiden (FedSage-style balanced), Metis,
label-Dirichlet, and their label-imbalanced variants Louvain+ and Metis+ (OpenFGL's:
over-partition, then group the parts by label histogram)."""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import networkx as nx
import numpy as np
import pymetis
from pydantic import BaseModel, ConfigDict, Field
from sklearn.cluster import KMeans

from fgl_workbench.data.datasets import Dataset, NodeDataset
from fgl_workbench.data.pair_keys import sorted_unique
from fgl_workbench.data.partition import PARTITIONERS, PartitionerSpec, local_edges
from fgl_workbench.errors import ConfigError, PartitionError

Engine = Literal["igraph", "networkx"]
SLOW_NETWORKX = 20_000  # nodes above which networkx's Louvain takes most of a cell


class LouvainParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    delta: int = Field(20, ge=0, description="slack around N/K when balancing client sizes")
    resolution: float = Field(1.0, gt=0.0)
    engine: Engine = Field(
        "networkx",
        description="networkx's pure-Python Louvain (the default: every published partition "
        "and figure replays; 200 s at 50k nodes) or igraph's compiled multilevel one (16 s "
        "at 50k weakly clustered nodes; different communities). For large graphs use the "
        "leiden partitioner (1.5 s at 50k)",
    )


def louvain(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Louvain communities, assigned to clients FedSage-style (``balanced``)."""
    assert isinstance(dataset, NodeDataset) and isinstance(p, LouvainParams)
    seed = int(rng.integers(2**31))
    if p.engine == "networkx":
        if ids.size > SLOW_NETWORKX:
            warnings.warn(
                f"louvain: networkx's pure-Python Louvain on {ids.size:,} nodes takes minutes "
                "(200 s at 50k); partition.params.engine: igraph, or method: leiden, is "
                "10-100x faster",
                stacklevel=2,
            )
        graph = nx.Graph()
        graph.add_nodes_from(ids.tolist())
        src, dst = local_edges(dataset, ids)
        graph.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
        found = nx.community.louvain_communities(graph, resolution=p.resolution, seed=seed)
        communities = [np.array(sorted(c), dtype=np.int64) for c in found]
    else:
        graph = _igraph(dataset, ids)
        with _igraph_seed(seed):
            membership = graph.community_multilevel(resolution=p.resolution).membership
        communities = _groups(ids, np.asarray(membership))
    return balanced(communities, ids.size, k, p.delta)


class LeidenParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    delta: int = Field(20, ge=0, description="slack around N/K when balancing client sizes")
    resolution: float = Field(1.0, gt=0.0, description="of the modularity")
    iterations: int = Field(2, ge=1, le=100, description="passes of the Leiden algorithm")


def leiden(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Leiden communities (Traag, Waltman & van Eck 2019: well-connected, unlike Louvain's;
    igraph's implementation, 10× faster than its multilevel Louvain on a weakly clustered
    graph), assigned to clients with Louvain's balancing rules (``balanced``)."""
    assert isinstance(dataset, NodeDataset) and isinstance(p, LeidenParams)
    graph = _igraph(dataset, ids)
    with _igraph_seed(int(rng.integers(2**31))):
        found = graph.community_leiden(
            objective_function="modularity", resolution=p.resolution, n_iterations=p.iterations
        )
    return balanced(_groups(ids, np.asarray(found.membership)), ids.size, k, p.delta)


def _igraph(dataset: NodeDataset, ids: np.ndarray) -> Any:
    """The undirected subgraph induced by ``ids`` (vertex i is ``ids[i]``), each edge once."""
    import igraph

    local = np.full(dataset.num_items, -1, dtype=np.int64)
    local[ids] = np.arange(ids.size)
    src, dst = local_edges(dataset, ids)
    a, b = local[src], local[dst]
    lo, hi = np.minimum(a, b), np.maximum(a, b)  # either direction stored
    keys = np.sort((lo * ids.size + hi)[lo != hi])  # no self-loops
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]  # each edge once
    graph = igraph.Graph(n=ids.size, directed=False)
    graph.add_edges(np.stack([keys // ids.size, keys % ids.size], 1))  # faster than Graph(edges=)
    return graph


@contextmanager
def _igraph_seed(seed: int) -> Iterator[None]:
    """igraph draws from a Python ``random``-like generator: a seeded one while inside."""
    import igraph

    igraph.set_random_number_generator(random.Random(seed))
    try:
        yield
    finally:
        igraph.set_random_number_generator(random)


def _groups(ids: np.ndarray, membership: np.ndarray) -> list[np.ndarray]:
    """The ids of each community, in increasing order, communities by label."""
    order = np.argsort(membership, kind="stable")
    cuts = np.flatnonzero(np.diff(membership[order])) + 1
    return [np.sort(ids[part]) for part in np.split(order, cuts)]


def balanced(communities: list[np.ndarray], n: int, k: int, delta: int) -> list[np.ndarray]:
    """Communities assigned FedSage-style: communities larger than N/K − δ are cut into chunks
    of that size; largest first, each goes to the next client (round robin) whose load is below
    N/K and stays within N/K + δ. When none qualifies, the community is spread over the
    least-loaded clients up to N/K + δ, so every client ends within the bound."""
    target = n // k
    cap = target + delta
    chunk = max(1, target - delta)
    pieces = []
    for members in communities:
        pieces.extend(members[i : i + chunk] for i in range(0, members.size, chunk))
    pieces.sort(key=lambda a: (-a.size, int(a[0])))

    loads = np.zeros(k, dtype=np.int64)
    owned: list[list[np.ndarray]] = [[] for _ in range(k)]
    turn = 0
    for piece in pieces:
        for step in range(k):
            c = (turn + step) % k
            if loads[c] < target and loads[c] + piece.size <= cap:
                owned[c].append(piece)
                loads[c] += piece.size
                turn = c + 1
                break
        else:
            rest = piece
            while rest.size:
                c = int(np.argmin(loads))
                take = min(rest.size, cap - int(loads[c]))
                owned[c].append(rest[:take])
                loads[c] += take
                rest = rest[take:]
    return [np.concatenate(o) if o else np.zeros(0, dtype=np.int64) for o in owned]


class MetisParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def metis(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Metis k-way min-cut on the CSR adjacency of the non-auxiliary subgraph."""
    assert isinstance(dataset, NodeDataset)
    if k == 1:
        return [ids]
    local = np.full(dataset.num_items, -1, dtype=np.int64)
    local[ids] = np.arange(ids.size)
    src, dst = local_edges(dataset, ids)
    src, dst = local[src], local[dst]
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    xadj = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=ids.size))])
    options = pymetis.Options(seed=int(rng.integers(2**31)))
    adjacency = pymetis.CSRAdjacency(xadj, dst)
    _, membership = pymetis.part_graph(k, adjacency, options=options)
    membership = np.asarray(membership)
    return [ids[membership == c] for c in range(k)]


class DirichletParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    alpha: float = Field(0.5, gt=0.0, description="Dirichlet concentration; small = skewed")
    min_size: int = Field(10, ge=1, description="minimum items per client")
    max_tries: int = Field(100, ge=1)


def label_dirichlet(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Each class is split across clients by proportions ~ Dir(α); redrawn until every client
    has at least ``min_size`` items, and an error (never an exit) if that cannot be met."""
    assert isinstance(p, DirichletParams)
    labels = dataset.labels[ids]
    if ids.size < k * p.min_size:
        raise PartitionError(
            f"label-dirichlet: {ids.size} items cannot give {k} clients min_size={p.min_size} each"
        )
    for _ in range(p.max_tries):
        shares: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in sorted_unique(labels):
            members = rng.permutation(ids[labels == c])
            props = rng.dirichlet(np.full(k, p.alpha))
            cuts = (np.cumsum(props)[:-1] * members.size).astype(np.int64)
            for client, part in enumerate(np.split(members, cuts)):
                shares[client].append(part)
        out = [np.concatenate(s) for s in shares]
        if min(o.size for o in out) >= p.min_size:
            return out
    raise PartitionError(
        f"label-dirichlet: no draw in {p.max_tries} tries gave every one of {k} clients "
        f"min_size={p.min_size} items (alpha={p.alpha}); raise alpha or lower min_size"
    )


class PlusParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    parts: int = Field(100, ge=2, le=100_000, description="parts of the over-partition")
    delta: int = Field(20, ge=0, description="Louvain+: slack around N/parts per part")
    resolution: float = Field(1.0, gt=0.0, description="Louvain+: Louvain's resolution")
    engine: Engine = Field("networkx", description="Louvain+: as Louvain's")


def grouped_by_label_histogram(
    dataset: Dataset, parts: list[np.ndarray], k: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """The parts clustered into ``k`` clients by KMeans on their normalised label histograms:
    parts with similar label mixes land together, so clients' label distributions differ."""
    parts = [p for p in parts if p.size]
    if len(parts) < k:
        raise PartitionError(
            f"partition.params.parts: {len(parts)} non-empty parts cannot make {k} clients"
        )
    hist = np.stack([np.bincount(dataset.labels[p], minlength=dataset.num_classes) for p in parts])
    hist = hist / hist.sum(1, keepdims=True)
    seed = int(rng.integers(2**31))
    group = KMeans(k, n_init=10, random_state=seed).fit_predict(hist)
    out = [
        np.sort(np.concatenate([p for p, g in zip(parts, group, strict=True) if g == c]))
        for c in range(k)
        if (group == c).any()
    ]
    if len(out) < k:
        raise PartitionError(f"louvain+/metis+: KMeans left {k - len(out)} of {k} clients empty")
    return out


def louvain_plus(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Louvain+: Louvain communities packed into ``parts`` balanced parts, grouped into ``k``
    clients by label histogram."""
    assert isinstance(p, PlusParams)
    over = louvain(
        dataset,
        ids,
        p.parts,
        rng,
        LouvainParams(delta=p.delta, resolution=p.resolution, engine=p.engine),
    )
    return grouped_by_label_histogram(dataset, over, k, rng)


def metis_plus(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Metis+: a ``parts``-way Metis cut, grouped into ``k`` clients by label histogram."""
    assert isinstance(p, PlusParams)
    over = metis(dataset, ids, p.parts, rng, MetisParams())
    return grouped_by_label_histogram(dataset, over, k, rng)


class GivenParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def given(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """The dataset's own assignment of nodes to clients (``data.group``: interbank's banks)."""
    group = getattr(getattr(dataset, "data", None), "group", None)
    if group is None:
        raise ConfigError(
            f"partition.method: 'given' needs a dataset that assigns its nodes to clients "
            f"(data.group, e.g. interbank's banks); '{dataset.name}' does not"
        )
    g = group.numpy(force=True)
    count = int(g.max()) + 1
    if k != count:
        raise ConfigError(
            f"partition.num_clients: '{dataset.name}' assigns its nodes to {count} clients "
            f"(got {k})"
        )
    return [ids[g[ids] == c] for c in range(count)]


PARTITIONERS.register("given")(PartitionerSpec("given", "node", GivenParams, given))
PARTITIONERS.register("louvain")(PartitionerSpec("louvain", "node", LouvainParams, louvain))
PARTITIONERS.register("leiden")(PartitionerSpec("leiden", "node", LeidenParams, leiden))
PARTITIONERS.register("metis")(PartitionerSpec("metis", "node", MetisParams, metis))
PARTITIONERS.register("label-dirichlet")(
    PartitionerSpec("label-dirichlet", "node", DirichletParams, label_dirichlet)
)
PARTITIONERS.register("louvain-plus")(
    PartitionerSpec("louvain-plus", "node", PlusParams, louvain_plus)
)
PARTITIONERS.register("metis-plus")(PartitionerSpec("metis-plus", "node", PlusParams, metis_plus))
