"""The structure challenge's pair list says nothing of which pairs are edges: scorers that
read the list alone, with no view, are at chance. On real MUTAG, whose molecules are numbered
along their bonds (the pairs' node numbering), and on real Cora, where a client's edges
listed beside uniform non-edges would show each node's degree in how often it occurs."""

import numpy as np
import pytest
from no_view_scorers import LEAKS
from scipy.stats import rankdata

from fgl_workbench.attacks.metrics import auc_interval
from fgl_workbench.attacks.reconstruction.structure import structure_challenge
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition


def within_graphs(scores: np.ndarray, graph_of: np.ndarray | None) -> np.ndarray:
    """Each score as its rank among its own graph's pairs, centred (0 to 1, all tied: 0.5), so a
    graph's size, which the server knows and which sets how dense its edges are, counts
    nothing: what is left is what the list says of which of a graph's pairs are bonds."""
    if graph_of is None:
        return scores
    out = np.empty(scores.size)
    for g in np.unique(graph_of):
        at = graph_of == g
        out[at] = (rankdata(scores[at]) - 0.5) / at.sum()  # ties: 0.5 in every graph
    return out


def at_chance(scorer, tasks) -> None:
    scores = np.concatenate(
        [within_graphs(scorer(t.candidates.src, t.candidates.dst), t.graph_of) for t in tasks]
    )
    truth = np.concatenate([t.is_edge for t in tasks])
    lo, hi = auc_interval(scores, truth, n=300)
    assert lo <= 0.5 <= hi, (scorer.__name__, lo, hi)


@pytest.fixture(scope="module")
def mutag(data_root):
    ds = load_dataset("MUTAG")
    return build_federation(ds, make_partition(ds, "iid", 40, 0))


@pytest.fixture(scope="module")
def cora_clients(cora):
    partition = make_partition(cora, "louvain", 10, 0, params={"delta": 20}, aux_fraction=0.1)
    return build_federation(cora, partition)


@pytest.mark.parametrize("scorer", LEAKS)
def test_mutag_pairs_carry_no_structure(mutag, scorer):
    """Ten clients' training graphs (about 25 molecules, 5000 pairs), each graph's pairs
    ranked among themselves (``within_graphs``)."""
    at_chance(scorer, [structure_challenge(mutag, k, k) for k in range(10)])


@pytest.mark.parametrize("max_pairs", [None, 4000])
@pytest.mark.parametrize("scorer", LEAKS)
def test_cora_pairs_carry_no_structure(cora_clients, scorer, max_pairs):
    """Client 0 of the documented suite; every pair of its nodes, or 4000 drawn from them."""
    cap = {} if max_pairs is None else {"max_pairs": max_pairs}
    at_chance(scorer, [structure_challenge(cora_clients, 0, 0, **cap)])
