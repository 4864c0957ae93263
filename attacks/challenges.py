"""Evaluation challenges: the records an attack is asked about, and (kept apart) the truth
used to score it. Only ``Challenge.candidates`` is handed to an attack."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fgl_workbench.adversary.candidates import Candidates, NodePairs
from fgl_workbench.attacks.attributes import attribute_values
from fgl_workbench.attacks.metrics import value_fractions
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation, NodeClient
from fgl_workbench.data.pair_keys import sorted_contains, sorted_unique
from fgl_workbench.defenses.metric_dp import MetricReleases
from fgl_workbench.errors import ConfigError, NotApplicableError


@dataclass(frozen=True)
class Challenge:
    candidates: Candidates
    is_member: np.ndarray  # ground truth, for scoring only
    owner: np.ndarray  # client holding each candidate, for per-client scoring only


def others_records(challenge: Challenge, k: int) -> Challenge:
    """The challenge without client ``k``'s records: a curious client knows its own, so it
    is asked only about the other clients' members and non-members."""
    keep = challenge.owner != k
    c = challenge.candidates
    graphs = tuple(g for g, kept in zip(c.graphs, keep, strict=True) if kept) if c.graphs else ()
    return Challenge(
        Candidates(c.level, c.ids[keep], c.labels[keep], graphs),
        challenge.is_member[keep],
        challenge.owner[keep],
    )


def membership_challenge(federation: Federation, seed: int) -> Challenge:
    """Members are the clients' training nodes (or graphs); non-members their test ones. A
    published split's training set is class-balanced while its test set follows the data, so
    there the non-members are a class-matched draw (``class_matched``): otherwise the label
    alone tells them apart (AUC 0.63 on Cora). Drawn splits are stratified per class already.
    The order is shuffled so position carries no information."""
    part = federation.partition
    ds = federation.dataset
    rng = np.random.default_rng(seed)
    members = np.concatenate([c.train for c in part.clients])
    nonmembers = np.concatenate([c.test for c in part.clients])
    if part.published_split:
        nonmembers = class_matched(nonmembers, ds.labels, ds.labels[members], rng)
    ids = np.concatenate([members, nonmembers])
    truth = np.concatenate([np.ones(members.size, bool), np.zeros(nonmembers.size, bool)])
    order = rng.permutation(ids.size)
    ids, truth = ids[order], truth[order]
    owner = part.owner(ds.num_items)[ids]
    graphs = () if isinstance(ds, NodeDataset) else tuple(ds.graphs[i] for i in ids.tolist())
    return Challenge(Candidates(ds.level, ids, ds.labels[ids], graphs), truth, owner)


def class_matched(
    ids: np.ndarray, labels: np.ndarray, member_labels: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """The largest random subset of ``ids`` whose class histogram is proportional to the
    members': of each class c, ⌊m_c · n_j / m_j⌋ drawn, where j is the class with the fewest
    ids per member (m: members, n: ids per class). Classes without members are left out."""
    classes, wanted = np.unique(member_labels, return_counts=True)
    pools = [ids[labels[ids] == c] for c in classes]
    have = np.array([pool.size for pool in pools])
    j = int(np.argmin(have / wanted))
    if have[j] == 0:
        raise NotApplicableError(
            f"membership challenge: class {classes[j]} has {wanted[j]} members but no test "
            "records to match them with"
        )
    counts = wanted * have[j] // wanted[j]
    picked = [rng.choice(pool, k, replace=False) for pool, k in zip(pools, counts, strict=True)]
    return np.sort(np.concatenate(picked))


def public_facts(federation: Federation, challenge: Challenge) -> np.ndarray:
    """What is known of each challenge record without knowing who trained on it, one column
    each (logarithms): its class's share of the dataset, the size of the client holding it,
    and its degree in the population graph, or at graph level its graph's size (nodes) and
    mean degree. A distinguisher fitted on these alone draws the challenge's chance line.
    Class and client enter as one number each rather than one-hot, so that the distinguisher
    has three or four parameters and little fitting noise to read as signal; the usual
    confound, a class-balanced training set against test records that follow the data, is
    monotone in the class's share."""
    ds = federation.dataset
    ids = challenge.candidates.ids
    share = np.bincount(ds.labels, minlength=ds.num_classes) / ds.num_items
    sizes = np.array([c.ids.size for c in federation.partition.clients])
    columns = [np.log(share[challenge.candidates.labels]), np.log(sizes[challenge.owner])]
    if isinstance(ds, NodeDataset):
        degree = np.bincount(ds.data.edge_index[0].numpy(force=True), minlength=ds.num_items)
        columns.append(np.log1p(degree[ids]))
    else:
        nodes = np.array([ds.graphs[i].num_nodes for i in ids.tolist()], dtype=float)
        edges = np.array([ds.graphs[i].edge_index.shape[1] for i in ids.tolist()], dtype=float)
        columns += [np.log1p(nodes), np.log1p(edges / np.maximum(nodes, 1))]
    return np.stack(columns, axis=1)


def design_strata(challenge: Challenge) -> np.ndarray:
    """Each record's (class, client) group: the cells a drawn split is stratified in, whose
    balance the chance line's folds keep."""
    return challenge.candidates.labels * (int(challenge.owner.max()) + 1) + challenge.owner


@dataclass(frozen=True)
class ClientDataChallenge:
    """One client's training data, which a reconstruction attack tries to recover: the
    features and labels of its training nodes, in the client's local order (scoring only)."""

    client_id: int
    features: np.ndarray
    labels: np.ndarray


def client_data_challenge(federation: Federation, k: int) -> ClientDataChallenge:
    clients = federation.clients
    if not 0 <= k < len(clients):
        raise ConfigError(
            f"attacks.params.client: expected a client index in [0, {len(clients) - 1}] (got {k})"
        )
    c = clients[k]
    if not isinstance(c, NodeClient):
        raise NotApplicableError("reconstructing a client's training nodes needs node-level data")
    mask = c.data.train_mask
    return ClientDataChallenge(
        k, c.data.x[mask].numpy(force=True), c.data.y[mask].numpy(force=True)
    )


@dataclass(frozen=True)
class FeatureChallenge:
    """Client nodes whose features an inversion attack reconstructs, and (scoring only)
    those features and every population node's, against which its nearest neighbours lie."""

    nodes: np.ndarray
    features: np.ndarray
    population: np.ndarray


def feature_challenge(
    federation: Federation, seed: int, max_nodes: int = 200, among: np.ndarray | None = None
) -> FeatureChallenge:
    """A random sample of at most ``max_nodes`` of the clients' nodes (of those ``among``,
    e.g. the nodes whose embeddings were exchanged, if given)."""
    ds = federation.dataset
    if not isinstance(ds, NodeDataset):
        raise NotApplicableError("feature inversion needs a node-level dataset")
    held = np.flatnonzero(held_owner(federation, among) >= 0)
    rng = np.random.default_rng(seed)
    nodes = np.sort(rng.choice(held, min(max_nodes, held.size), replace=False))
    x = ds.data.x.numpy(force=True)
    return FeatureChallenge(nodes, x[nodes], x)


def held_owner(federation: Federation, among: np.ndarray | None) -> np.ndarray:
    """Each node's client, -1 for nodes no client holds or (with ``among``) not among those."""
    owner = federation.partition.owner(federation.dataset.num_items)
    if among is None:
        return owner
    return np.where(np.isin(np.arange(owner.size), among), owner, -1)


@dataclass(frozen=True)
class LinkChallenge:
    """Node pairs to judge, of three kinds. ``intra``: pairs inside one client, half of them
    edges of that client's private subgraph, half non-adjacent pairs of the same client (the
    hard negatives). ``cut``: pairs across clients, half edges the partition cut (held by no
    client), half non-adjacent pairs of the same two clients. ``uniform``: non-adjacent pairs
    of client nodes drawn uniformly (mostly across clients, easy to tell apart), as many as
    the intra edges: He et al.'s protocol (USENIX Security 2021) scores the intra edges
    against these, and a node's count tells its degree there by construction.

    Each non-edge is the image of an edge under φ, a pairing of each client's nodes into
    degree twins (``twin_pairs``), and φ maps the list's edges onto its non-edges and back:
    the graph the list draws looks the same from either, so no count, shared neighbour or
    path of the list alone tells them apart. The intra edges are picked so that each node
    ends as many of them as its twin (``_balanced_edges``): each node is then in as many
    intra non-edges as intra edges, and the edges the adversary knows, which are never the
    ones asked about, are as many at the ends of either. The attack reads the pairs under
    pseudonyms (``names``): a dataset's own numbering carries structure.

    ``candidates``: what the attack is asked, under pseudonyms. For the challenger only:
    ``pairs`` (the same pairs as population ids: the deployments are queried by these),
    ``names`` (each population node's pseudonym), ``is_edge`` and ``kind``. ``known_*``
    (population ids; the knowledge built from them is handed over under the same
    pseudonyms) are the adversary's stated partial knowledge: a share of the intra-client
    edges and as many same-client non-edges, matched per node (``_matched_non_edges``),
    disjoint from the pairs it is asked about."""

    candidates: NodePairs
    pairs: NodePairs
    names: np.ndarray
    is_edge: np.ndarray  # ground truth, for scoring only
    kind: np.ndarray  # "intra", "cut" or "uniform" per pair, for scoring only
    known_edges: np.ndarray  # [2, K]
    known_non_edges: np.ndarray  # [2, K]


def link_challenge(
    federation: Federation,
    seed: int,
    known_fraction: float = 0.2,
    max_pairs: int = 2000,
    among: np.ndarray | None = None,
) -> LinkChallenge:
    """Positives: the population graph's edges between client nodes (``max_pairs`` at most
    of each kind, those φ maps to non-edges); negatives: their images, and as many uniform
    non-edges as intra edges. With ``among``, both endpoints of every pair (known ones
    included) are among those nodes."""
    ds = federation.dataset
    if not isinstance(ds, NodeDataset):
        raise NotApplicableError("link inference needs a node-level dataset")
    rng = np.random.default_rng(seed)
    n = ds.num_items
    owner = held_owner(federation, among)
    src, dst = ds.data.edge_index.numpy(force=True)
    keep = (src < dst) & (owner[src] >= 0) & (owner[dst] >= 0)
    adjacent = sorted_unique(src[keep] * n + dst[keep])  # keys u * n + v of the edges
    edges = np.stack([adjacent // n, adjacent % n])
    edges = edges[:, rng.permutation(edges.shape[1])]
    intra = np.flatnonzero(owner[edges[0]] == owner[edges[1]])
    known = intra[: int(known_fraction * intra.size)]
    known_edges = edges[:, known]
    edges = np.delete(edges, known, axis=1)  # those asked about are drawn from the rest
    twin = twin_pairs(federation, owner, rng)
    edges = edges[:, _imaged(edges, twin, adjacent)]
    cut = owner[edges[0]] != owner[edges[1]]
    inside = edges[:, ~cut]
    positives = np.concatenate(
        [inside[:, _balanced_edges(inside, twin, max_pairs, rng)], edges[:, cut][:, :max_pairs]],
        axis=1,
    )
    negatives = twin[positives]
    taken = set((negatives.min(0) * n + negatives.max(0)).tolist())
    known_non = _matched_non_edges(known_edges, owner, True, adjacent, taken, rng)
    pairs = np.concatenate([positives, negatives], axis=1)
    is_edge = np.arange(pairs.shape[1]) < positives.shape[1]
    order = rng.permutation(pairs.shape[1])
    pairs, is_edge = _random_ends(pairs[:, order], rng), is_edge[order]
    names = rng.permutation(n)
    is_cut = owner[pairs[0]] != owner[pairs[1]]
    kind = np.where(is_cut, "cut", "intra").astype(object)  # no width to truncate "uniform"
    intra_edges = int((is_edge & ~is_cut).sum())
    # drawn last, so the other pairs (and every figure scored on them) stay as they were
    uniform = _random_ends(_non_edges(owner, intra_edges, None, adjacent, taken, rng), rng)
    at = np.sort(rng.choice(pairs.shape[1] + uniform.shape[1], uniform.shape[1], replace=False))
    before = at - np.arange(at.size)  # np.insert counts positions in the array it inserts into
    pairs = np.insert(pairs, before, uniform, axis=1)
    is_edge = np.insert(is_edge, before, False)
    kind = np.insert(kind, before, "uniform")
    return LinkChallenge(
        NodePairs(names[pairs[0]], names[pairs[1]]),
        NodePairs(pairs[0], pairs[1]),
        names,
        is_edge,
        kind,
        known_edges,
        known_non,
    )


def twin_pairs(federation: Federation, owner: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each client node's twin (-1 for none): the nodes of each client sorted by their degree
    in the client's subgraph (what a deployment's answer mixes), then in the population graph
    (what a release's does), ties in random order, and paired off in that order."""
    src, dst = federation.dataset.data.edge_index.numpy(force=True)
    held = federation.partition.owner(owner.size)
    local = (held[src] == held[dst]) & (held[src] >= 0)
    n = owner.size
    nodes = np.flatnonzero(owner >= 0)
    order = np.lexsort(
        (
            rng.random(nodes.size),
            np.bincount(src, minlength=n)[nodes],
            np.bincount(src[local], minlength=n)[nodes],
            owner[nodes],
        )
    )
    nodes = nodes[order]
    twin = np.full(n, -1, dtype=np.int64)
    runs = np.flatnonzero(np.diff(owner[nodes], prepend=-1, append=-1))
    for start, stop in zip(runs[:-1], runs[1:], strict=True):
        first, second = nodes[start : stop - 1 : 2], nodes[start + 1 : stop : 2]
        twin[first], twin[second] = second, first
    return twin


PASSES = 3  # walks started from each edge still unused: a third pass adds a few percent


def _imaged(edges: np.ndarray, twin: np.ndarray, adjacent: np.ndarray) -> np.ndarray:
    """Which ``edges`` φ maps to a non-edge (φ: ``twin``): both ends have twins, φu is not v
    (the edge would map to itself) and (φu, φv) is not adjacent."""
    a, b = twin[edges[0]], twin[edges[1]]
    fit = (a >= 0) & (b >= 0) & (a != edges[1])
    lo = np.minimum(a, b)
    np.maximum(a, b, out=b)
    lo *= twin.size
    lo += b  # the key of (φu, φv), computed in place: edge lists are the big arrays here
    return fit & ~sorted_contains(adjacent, lo)


def _balanced_edges(
    edges: np.ndarray, twin: np.ndarray, max_pairs: int, rng: np.random.Generator
) -> np.ndarray:
    """Which of ``edges`` ([2, m], in random order, each mapped by φ to a non-edge) are
    asked about: at most ``max_pairs``, each node an end of as many of them as its twin.
    Found as closed walks: leave a node by an edge, arrive at its other end y, leave y's
    twin φy by another edge, ... until a node is arrived at again (or the first one's
    twin): the edges between its two arrivals give each node they touch and its twin one
    edge each. Walks start from every unused edge in turn (``PASSES`` times over), picking
    each next edge at random among those unused, and are dropped where they reach a node
    whose twin has none left; the first loop past ``max_pairs`` ends the search."""
    n, m = twin.size, edges.shape[1]
    incident = np.argsort(edges.ravel(), kind="stable") % m  # each node's edges in a run
    starts = np.concatenate([[0], np.cumsum(np.bincount(edges.ravel(), minlength=n))])
    used = np.zeros(m, dtype=bool)
    count = 0
    for step in range(PASSES * m):
        first = step % m
        if used[first]:
            continue
        leave, arrive = edges[:, first] if rng.random() < 0.5 else edges[::-1, first]
        path, arrived, on_path = [first], {int(twin[leave]): -1, int(arrive): 0}, {first}
        while True:
            out = incident[starts[twin[arrive]] : starts[twin[arrive] + 1]]
            out = [e for e in out[~used[out]].tolist() if e not in on_path]
            if not out:
                break
            e = out[int(rng.integers(len(out)))]
            node = int(edges[0, e] + edges[1, e] - twin[arrive])
            path.append(e)
            on_path.add(e)
            if node in arrived:
                loop = path[arrived[node] + 1 :]
                if count + len(loop) > max_pairs:
                    return used
                used[loop] = True
                count += len(loop)
                break
            arrived[node] = len(path) - 1
            arrive = node
    return used


def _random_ends(pairs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each pair's endpoints swapped with probability 1/2, in place: endpoint order carries
    no information."""
    flip = rng.random(pairs.shape[1]) < 0.5
    pairs[:, flip] = pairs[::-1, flip]
    return pairs


def _matched_non_edges(
    edges: np.ndarray,
    owner: np.ndarray,
    same_client: bool,
    adjacent: np.ndarray,
    taken: set[int],
    rng: np.random.Generator,
    rounds: int = 50,
) -> np.ndarray:
    """Distinct non-adjacent pairs, one per edge of ``edges`` ([2, m]) as far as they can be
    found, each node an end of as many of them as of the edges: the i-th edge's one end (its
    side drawn at random) with the π(i)-th edge's other end, π a permutation redrawn among the
    pairs that come out adjacent, repeated, looped, already ``taken`` or of the wrong kind
    (inside one client or across two, ``same_client``; inside, π keeps to the client), each
    time with as many pairs that came out well. Uniform non-edges would show the edges'
    ends, high-degree nodes, in how often they occur (a list-count scorer with no view: AUC
    0.58–0.65 on Cora). Pairs still wrong after ``rounds`` are left out, so a few nodes may
    end one pair fewer."""
    if edges.shape[1] == 0:
        return edges.copy()
    ends = _random_ends(edges.copy(), rng)
    first, other = ends[0], ends[1].copy()
    group = owner[first] if same_client else np.zeros(first.size, dtype=np.int64)
    n = owner.size
    used = np.fromiter(taken, dtype=np.int64, count=len(taken))
    everyone = np.arange(first.size)
    bad = everyone
    for _ in range(rounds + 1):
        if bad.size:  # redraw the partners of the bad pairs and of as many others
            good = np.setdiff1d(everyone, bad, assume_unique=True)
            mix = np.concatenate([bad, rng.choice(good, min(bad.size, good.size), False)])
            base = mix[np.argsort(group[mix], kind="stable")]
            other[base] = other[mix[np.lexsort((rng.random(mix.size), group[mix]))]]
        lo, hi = np.minimum(first, other), np.maximum(first, other)
        keys = lo * n + hi
        wrong = (lo == hi) | sorted_contains(adjacent, keys) | np.isin(keys, used)
        wrong |= (owner[lo] == owner[hi]) != same_client
        seen = np.zeros(keys.size, dtype=bool)
        seen[np.unique(keys, return_index=True)[1]] = True
        bad = np.flatnonzero(wrong | ~seen)
        if bad.size == 0:
            break
    keep = np.setdiff1d(everyone, bad, assume_unique=True)
    taken.update(keys[keep].tolist())
    return np.stack([lo[keep], hi[keep]])


def _non_edges(
    owner: np.ndarray,
    count: int,
    same_client: bool | None,
    adjacent: np.ndarray,
    taken: set[int],
    rng: np.random.Generator,
) -> np.ndarray:
    """``count`` distinct non-adjacent pairs (u < v) of client nodes, inside one client,
    across two, or (``same_client=None``) either, both ends uniform; ``adjacent`` holds the
    edges' sorted keys u * n + v (a binary search, not a set of every edge); ``taken`` keeps
    the draws of one challenge disjoint."""
    n = owner.size
    nodes = np.flatnonzero(owner >= 0)
    by_client = np.argsort(owner, kind="stable")  # each client's nodes in a run, in id order
    sizes = np.bincount(owner[nodes])
    first = np.searchsorted(owner[by_client], np.arange(sizes.size))
    out: list[tuple[int, int]] = []
    while len(out) < count:
        u = rng.choice(nodes, size=2 * (count - len(out)) + 16)
        if same_client:
            client = owner[u]  # one draw per pair, as rng.choice on each client's nodes
            v = by_client[first[client] + rng.integers(0, sizes[client])]
        else:
            v = rng.choice(nodes, size=u.size)
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        keys = lo * n + hi
        fit = (lo != hi) & ~sorted_contains(adjacent, keys)
        if same_client is not None:
            fit &= (owner[lo] == owner[hi]) == same_client
        for a, b, key in zip(lo[fit].tolist(), hi[fit].tolist(), keys[fit].tolist(), strict=True):
            if key in taken:
                continue
            taken.add(key)
            out.append((a, b))
            if len(out) == count:
                break
    return np.array(out, dtype=np.int64).T.reshape(2, count)


@dataclass(frozen=True)
class DistributionChallenge:
    """Each client's training label distribution, to be inferred from what it uploads. The
    adversary is told only which clients exist."""

    clients: np.ndarray  # client ids: the candidates
    truth: np.ndarray  # [clients, classes] label fractions, for scoring only


def label_distribution_challenge(federation: Federation) -> DistributionChallenge:
    ds = federation.dataset
    rows = []
    for c in federation.partition.clients:
        rows.append(value_fractions(ds.labels[c.train], ds.num_classes))
    ids = np.array([c.client_id for c in federation.partition.clients])
    return DistributionChallenge(ids, np.stack(rows))


@dataclass(frozen=True)
class AttributeChallenge:
    """Client nodes whose hidden attribute (the label, or one binary feature column) the
    adversary infers. ``hidden`` says which feature column the adversary must not be given
    (None for the label)."""

    nodes: np.ndarray  # the candidates
    truth: np.ndarray  # attribute value per node, for scoring only
    hidden: int | None
    num_values: int


def attribute_challenge(
    federation: Federation,
    attribute: str,
    seed: int,
    max_nodes: int = 2000,
    among: np.ndarray | None = None,
) -> AttributeChallenge:
    """``attribute``: ``label`` or ``feature:J`` (column J, binarised at its median when it
    is not already 0/1); the nodes asked about are clients' nodes (``among`` those, if
    given)."""
    ds = federation.dataset
    if not isinstance(ds, NodeDataset):
        raise NotApplicableError("attribute inference needs a node-level dataset")
    nodes = np.flatnonzero(held_owner(federation, among) >= 0)
    rng = np.random.default_rng(seed)
    nodes = np.sort(rng.permutation(nodes)[:max_nodes])
    if attribute == "label":
        return AttributeChallenge(nodes, ds.labels[nodes], None, ds.num_classes)
    column = int(attribute.split(":", 1)[1])
    if column >= ds.num_features:
        raise ConfigError(
            f"attacks[].params.attribute: feature column {column} does not exist "
            f"({ds.name} has {ds.num_features} features, 0 to {ds.num_features - 1})"
        )
    values = attribute_values(ds.data.x[:, column].numpy(force=True), federation.partition.aux_ids)
    return AttributeChallenge(nodes, values[nodes], column, 2)


@dataclass(frozen=True)
class ReidentificationChallenge:
    """The metric-DP distinguishing game (CE-FedGNN's guarantee, audited) on the target's real
    releases: for disjoint pairs of released nodes whose clean vectors lie within ρ at every
    release, the challenger secretly picks one node of each pair (``chosen``: 1 for the
    second) and shows the noisy vectors the target actually released for it. The adversary
    knows both candidates' clean vectors (the strongest adversary the guarantee speaks of);
    ``chosen`` is for scoring only."""

    pairs: NodePairs  # global node ids
    first: np.ndarray  # [pairs, releases, dim] clean vectors of the first candidate
    second: np.ndarray
    releases: np.ndarray  # [pairs, releases, dim] what was released for the chosen one
    chosen: np.ndarray  # ground truth, for scoring only
    rho: float
    distance: np.ndarray  # each pair's distance (≤ ρ), for scoring only


def reidentification_challenge(
    released: MetricReleases, rho: float, trials: int, seed: int
) -> ReidentificationChallenge:
    """Nodes in random order, each paired with the farthest unpaired node within ρ of it
    (the hardest pair the guarantee covers); every node is in one pair at most, so no noise
    draw is shown twice. (Where a node's later clean vectors depend on earlier releases, as
    CE-FedGNN's estimators do, the trials are not strictly independent.)"""
    rng = np.random.default_rng(seed)
    n = released.nodes.size
    used = np.zeros(n, dtype=bool)
    pairs: list[tuple[int, int, float]] = []
    order = rng.permutation(n)
    for start in range(0, n, 1024):
        if len(pairs) == trials:
            break
        rows = order[start : start + 1024]
        dist = released.distances(rows)
        for i, j in enumerate(rows.tolist()):
            if used[j] or len(pairs) == trials:
                continue
            within = (dist[i] <= rho) & ~used
            within[j] = False
            if within.any():
                k = int(np.flatnonzero(within)[np.argmax(dist[i][within])])
                used[[j, k]] = True
                pairs.append((j, k, float(dist[i, k])))
    if len(pairs) < 20:
        raise NotApplicableError(
            f"reidentification audit: only {len(pairs)} disjoint pairs of released nodes lie "
            f"within ρ = {rho:.4f}"
        )
    u, v, d = (np.array(x) for x in zip(*pairs, strict=True))
    chosen = rng.random(u.size) < 0.5
    shown = released.noisy[np.where(chosen, v, u)]
    nodes = NodePairs(released.nodes[u], released.nodes[v])
    return ReidentificationChallenge(
        nodes, released.clean[u], released.clean[v], shown, chosen, rho, d
    )


@dataclass(frozen=True)
class SourceChallenge:
    """The generators a client received (in the order received), each one's source dataset
    (the sender's member of a ``graph-mixture``) held for scoring only."""

    generators: np.ndarray  # positions in the received order: the candidates
    truth: np.ndarray  # source index per generator
    num_sources: int


def source_challenge(federation: Federation, senders: Sequence[int]) -> SourceChallenge:
    ds = federation.dataset
    names = getattr(ds, "source_names", ())
    if len(names) < 2:
        raise NotApplicableError("source inference needs a mixture of datasets (graph-mixture)")
    source = ds.source
    truth = []
    for j in senders:
        ids = federation.partition.clients[j].train
        truth.append(int(np.bincount(source[ids], minlength=len(names)).argmax()))
    return SourceChallenge(np.arange(len(senders)), np.array(truth, dtype=np.int64), len(names))
