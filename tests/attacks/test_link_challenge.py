"""The link challenge at scale: its edge set is a sorted key array (no Python set of every
edge), and every pair it draws is the one the set-based version drew."""

import hashlib
import tracemalloc

import numpy as np
import pytest

from fgl_workbench.attacks.challenges import link_challenge
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.data.synthetic import CSBMParams, csbm

# Digests of the challenges the set-based version (before issue 44) drew on these federations.
SET_BASED = [
    ("metis", 400, 3, False, "5e9488dfccd6d467"),
    ("metis", 400, 3, True, "a1a47b787adac03b"),
    ("louvain", 3000, 4, False, "fc95663ef69d3df3"),
]
# A set of Python ints costs ~4x the [2, E] edge list; sorted keys and their copies ~1.8x.
MAX_PEAK_PER_EDGE_LIST = 2.5


def _digest(challenge) -> str:
    parts = (
        challenge.candidates.src,
        challenge.candidates.dst,
        challenge.is_edge,
        challenge.kind.astype(str),
        challenge.known_edges,
        challenge.known_non_edges,
    )
    digest = hashlib.sha256()
    for part in parts:
        digest.update(np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()[:16]


@pytest.mark.parametrize(("method", "n", "clients", "among", "digest"), SET_BASED)
def test_pairs_are_those_the_set_based_challenge_drew(method, n, clients, among, digest):
    ds = csbm(CSBMParams(num_nodes=n, num_features=8, seed=3))
    federation = build_federation(ds, make_partition(ds, method, clients, 0, aux_fraction=0.2))
    subset = np.sort(np.random.default_rng(1).choice(n, n // 2, replace=False)) if among else None
    assert _digest(link_challenge(federation, 7, among=subset)) == digest


def test_the_edge_set_costs_no_more_than_a_couple_of_edge_lists():
    ds = csbm(CSBMParams(num_nodes=50_000, num_features=4, avg_degree=10.0, seed=3))
    federation = build_federation(ds, make_partition(ds, "label-dirichlet", 2, 0))
    tracemalloc.start()
    try:
        link_challenge(federation, 0, known_fraction=0.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_PEAK_PER_EDGE_LIST * ds.data.edge_index.numpy().nbytes
