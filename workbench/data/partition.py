"""A partition of a dataset across clients, with everything later stages need as ground truth.

Pipeline (one seed drives all of it): carve the attacker's auxiliary pool out first (stratified
by label, so it comes from the same distribution), hand the rest to a partitioner, split each
client's share into stratified train/val/test, and record the edges the partition cut.

``membership`` says what each client trains on (``fgl_workbench.data.federation``):
``transductive``, its whole local graph with a training mask; ``inductive``, only the subgraph
its training nodes induce (Olatunji et al.'s setting), so no non-member reaches training.

With ``split="public"`` each client's train/val/test are its nodes in the dataset's published
split (as FedGC, FedGCN and GCOND evaluate), its other nodes are unlabelled, and the auxiliary
pool comes from the nodes outside the published split, so the split stays whole."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

import numpy as np
from pydantic import BaseModel

from fgl_workbench.data.datasets import Dataset, Level, NodeDataset
from fgl_workbench.data.pair_keys import sorted_unique
from fgl_workbench.errors import ConfigError, PartitionError
from fgl_workbench.registry import Registry

Membership = Literal["transductive", "inductive"]
MEMBERSHIPS: tuple[str, ...] = get_args(Membership)


@dataclass(frozen=True)
class ClientPart:
    """One client's share, as global ids (node ids or graph indices)."""

    client_id: int
    ids: np.ndarray
    train: np.ndarray
    val: np.ndarray
    test: np.ndarray


@dataclass(frozen=True)
class ClientStats:
    client_id: int
    size: int
    num_train: int
    num_val: int
    num_test: int
    label_histogram: list[int]
    num_edges: int  # local (kept) undirected edges; 0 at graph level
    edge_homophily: float | None  # fraction of local edges joining same-label nodes


@dataclass(frozen=True)
class Partition:
    level: Level
    method: str
    clients: tuple[ClientPart, ...]
    aux_ids: np.ndarray
    cut_edges: np.ndarray = field(default_factory=lambda: np.zeros((2, 0), dtype=np.int64))
    # train/val/test are the dataset's published split, not drawn per class: their class
    # histograms differ (Cora: 20 training nodes per class, a test set that follows the data)
    published_split: bool = False
    membership: Membership = "transductive"

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def owner(self, num_items: int) -> np.ndarray:
        """Client of every item; -1 for the auxiliary pool."""
        own = np.full(num_items, -1, dtype=np.int64)
        for c in self.clients:
            own[c.ids] = c.client_id
        return own

    def stats(self, dataset: Dataset) -> list[ClientStats]:
        labels = dataset.labels
        out = []
        for c in self.clients:
            hist = np.bincount(labels[c.ids], minlength=dataset.num_classes).tolist()
            edges, homophily = 0, None
            if isinstance(dataset, NodeDataset):
                src, dst = local_edges(dataset, c.ids)
                edges = int(src.size // 2)
                homophily = float((labels[src] == labels[dst]).mean()) if src.size else None
            out.append(
                ClientStats(
                    c.client_id,
                    int(c.ids.size),
                    int(c.train.size),
                    int(c.val.size),
                    int(c.test.size),
                    hist,
                    edges,
                    homophily,
                )
            )
        return out


def local_edges(dataset: NodeDataset, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Directed edge list (global ids) of the subgraph induced by ``ids``."""
    ei = dataset.data.edge_index.numpy(force=True)
    inside = np.zeros(dataset.num_items, dtype=bool)
    inside[ids] = True
    keep = inside[ei[0]] & inside[ei[1]]
    return ei[0, keep], ei[1, keep]


# A partitioner maps (dataset, ids to share out, number of clients, rng, params) to one id
# array per client. It sees only the non-auxiliary ids.
Partitioner = Callable[[Dataset, np.ndarray, int, np.random.Generator, BaseModel], list[np.ndarray]]


@dataclass(frozen=True)
class PartitionerSpec:
    name: str
    level: Level
    params: type[BaseModel]
    split: Partitioner


PARTITIONERS: Registry[PartitionerSpec] = Registry("partitioner")

DEFAULT_SPLIT: dict[Level, tuple[float, float, float]] = {
    "node": (0.2, 0.4, 0.4),
    "graph": (0.7, 0.1, 0.2),
}


def make_partition(
    dataset: Dataset,
    method: str,
    num_clients: int,
    seed: int,
    *,
    params: dict | None = None,
    split: Sequence[float] | Literal["public"] | None = None,
    aux_fraction: float = 0.0,
    membership: Membership = "transductive",
) -> Partition:
    spec = PARTITIONERS.get(method, field="partition.method")
    check_membership(membership, dataset.level)
    if spec.level != dataset.level:
        raise ConfigError(
            f"partition.method: '{method}' partitions {spec.level}-level data but dataset "
            f"'{dataset.name}' is {dataset.level}-level; valid choices: "
            + ", ".join(n for n in PARTITIONERS if PARTITIONERS.get(n).level == dataset.level)
        )
    if num_clients < 1:
        raise ConfigError(f"partition.num_clients: must be >= 1 (got {num_clients})")
    if not 0.0 <= aux_fraction < 1.0:
        raise ConfigError(f"partition.aux_fraction: must be in [0, 1) (got {aux_fraction})")
    public = _public_split(dataset) if split == "public" else None
    ratios = DEFAULT_SPLIT[dataset.level] if split is None or public is not None else tuple(split)
    rng = np.random.default_rng(seed)
    labels = dataset.labels
    all_ids = np.arange(dataset.num_items)
    if public is None:
        aux = stratified_sample(all_ids, labels, aux_fraction, rng)
    else:
        aux = _aux_outside(all_ids, labels, np.concatenate(public), aux_fraction, rng)
    rest = np.setdiff1d(all_ids, aux, assume_unique=True)  # both sorted, distinct: no hashing
    shares = spec.split(dataset, rest, num_clients, rng, spec.params(**(params or {})))
    clients = []
    for k, ids in enumerate(shares):
        ids = np.sort(ids)
        if ids.size == 0:
            raise PartitionError(
                f"partition '{method}' left client {k} empty ({dataset.num_items} items, "
                f"{num_clients} clients); use fewer clients"
            )
        if public is None:
            train, val, test = stratified_split(ids, labels, ratios, rng)
        else:
            train, val, test = (np.intersect1d(ids, s) for s in public)
        clients.append(ClientPart(k, ids, train, val, test))
    published = public is not None
    part = Partition(
        dataset.level,
        method,
        tuple(clients),
        np.sort(aux),
        published_split=published,
        membership=membership,
    )
    if isinstance(dataset, NodeDataset):
        part = replace(part, cut_edges=_cut_edges(dataset, part))
    return part


def check_membership(membership: str, level: Level) -> None:
    """``inductive`` is a node-level setting: a graph-level client's test graphs never
    reach its training anyway, so there is nothing to take out."""
    if membership not in MEMBERSHIPS:
        raise ConfigError(
            f"partition.membership: expected one of {', '.join(MEMBERSHIPS)} (got {membership!r})"
        )
    if membership == "inductive" and level != "node":
        raise ConfigError(
            "partition.membership: 'inductive' is a node-level setting; graph-level clients "
            "already train on their training graphs alone (leave it 'transductive')"
        )


def _public_split(dataset: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    public = getattr(dataset, "public_split", None)
    if public is None:
        raise ConfigError(
            f"partition.split: 'public' needs a dataset with a published split (Cora, CiteSeer, "
            f"PubMed); '{dataset.name}' has none, give three ratios instead"
        )
    return public


def _aux_outside(
    ids: np.ndarray,
    labels: np.ndarray,
    split_ids: np.ndarray,
    fraction: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """``fraction`` of all ids as an auxiliary pool drawn only from ``ids`` outside the
    published split, which therefore reaches the clients whole."""
    outside = np.setdiff1d(ids, split_ids)
    share = fraction * ids.size / max(outside.size, 1)
    if share > 1.0:
        raise ConfigError(
            f"partition.aux_fraction: {fraction} of {ids.size} nodes is more than the "
            f"{outside.size} outside the public split; expected at most "
            f"{outside.size / ids.size:.3f}"
        )
    return stratified_sample(outside, labels, share, rng)


def stratified_sample(
    ids: np.ndarray, labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> np.ndarray:
    """``fraction`` of ``ids`` drawn per class, so the sample follows the label distribution."""
    if fraction <= 0:
        return np.zeros(0, dtype=np.int64)
    picked = []
    for c in sorted_unique(labels[ids]):
        members = rng.permutation(ids[labels[ids] == c])
        picked.append(members[: int(round(fraction * members.size))])
    return np.sort(np.concatenate(picked)).astype(np.int64)


def stratified_split(
    ids: np.ndarray,
    labels: np.ndarray,
    ratios: tuple[float, ...],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per class: floor(r_train·n) train, floor(r_val·n) val, the rest test (as FedTAD's code)."""
    if len(ratios) != 3 or min(ratios) < 0 or abs(sum(ratios) - 1.0) > 1e-6:
        raise ConfigError(
            f"partition.split: expected 3 non-negative ratios summing to 1, got {ratios}"
        )
    parts: tuple[list, list, list] = ([], [], [])
    for c in sorted_unique(labels[ids]):
        members = rng.permutation(ids[labels[ids] == c])
        n_train = int(ratios[0] * members.size)
        n_val = int(ratios[1] * members.size)
        parts[0].append(members[:n_train])
        parts[1].append(members[n_train : n_train + n_val])
        parts[2].append(members[n_train + n_val :])
    return tuple(np.sort(np.concatenate(p)).astype(np.int64) for p in parts)  # type: ignore[return-value]


def _cut_edges(dataset: NodeDataset, part: Partition) -> np.ndarray:
    """Undirected edges (u < v) whose endpoints belong to two different clients."""
    owner = part.owner(dataset.num_items)
    src, dst = dataset.data.edge_index.numpy(force=True)
    cut = (owner[src] >= 0) & (owner[dst] >= 0) & (owner[src] != owner[dst]) & (src < dst)
    return np.stack([src[cut], dst[cut]]).astype(np.int64)
