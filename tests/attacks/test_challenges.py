"""The membership challenge's make-up and the non-private facts its chance line is fitted on."""

import numpy as np
import pytest

from fgl_workbench.attacks.challenges import (
    class_matched,
    design_strata,
    membership_challenge,
    public_facts,
)
from fgl_workbench.attacks.metrics import chance_line
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.errors import NotApplicableError


def test_published_split_is_class_matched_so_the_label_tells_nothing(cora):
    """Cora's public split trains on 20 nodes of each class and tests on 1,000 that follow the
    data (64 to 319 per class): the label alone told them apart (chance line 0.64). The
    non-members are now as many of each class as the rarest class has test nodes."""
    part = make_partition(cora, "label-dirichlet", 10, seed=0, split="public", aux_fraction=0.2)
    federation = build_federation(cora, part)
    challenge = membership_challenge(federation, seed=0)
    labels, members = challenge.candidates.labels, challenge.is_member
    test = cora.public_split[2]
    rarest = np.bincount(cora.labels[test], minlength=cora.num_classes).min()
    assert np.bincount(labels[members], minlength=cora.num_classes).tolist() == [20] * 7
    assert np.bincount(labels[~members], minlength=cora.num_classes).tolist() == [rarest] * 7
    assert np.isin(challenge.candidates.ids[~members], test).all()
    facts, strata = public_facts(federation, challenge), design_strata(challenge)
    line = chance_line(facts, members, strata, seed=0)
    assert line["chance_auc_ci_low"] < 0.5 < line["chance_auc_ci_high"]


def test_class_matched_draws_the_largest_proportional_subset():
    labels = np.array([0] * 5 + [1] * 6 + [2] * 3)
    pool = np.arange(labels.size)
    members = np.array([0, 0, 1, 1, 1, 1])  # 2 : 4, and no member of class 2
    picked = class_matched(pool, labels, members, np.random.default_rng(0))
    # class 1 is the scarcest (6 for 4 members): 3 of class 0, all 6 of class 1, none of 2
    assert np.bincount(labels[picked], minlength=3).tolist() == [3, 6, 0]
    assert np.unique(picked).size == picked.size
    with pytest.raises(NotApplicableError, match="class 3 has 1 members but no test records"):
        class_matched(pool, labels, np.array([0, 3]), np.random.default_rng(0))


def test_public_facts_are_class_share_client_size_and_degree(small_csbm, small_graphs):
    node_fed = build_federation(small_csbm, make_partition(small_csbm, "louvain", 3, seed=0))
    challenge = membership_challenge(node_fed, seed=0)
    facts = public_facts(node_fed, challenge)
    v, k = int(challenge.candidates.ids[0]), int(challenge.owner[0])
    share = (small_csbm.labels == small_csbm.labels[v]).mean()
    degree = int((small_csbm.data.edge_index[0] == v).sum())
    size = node_fed.partition.clients[k].ids.size
    assert np.allclose(facts[0], [np.log(share), np.log(size), np.log1p(degree)])

    graph_fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 3, seed=0))
    challenge = membership_challenge(graph_fed, seed=0)
    facts = public_facts(graph_fed, challenge)
    g = small_graphs.graphs[int(challenge.candidates.ids[0])]
    assert facts.shape == (challenge.is_member.size, 4)
    mean_degree = g.edge_index.shape[1] / g.num_nodes
    assert np.allclose(facts[0, 2:], [np.log1p(g.num_nodes), np.log1p(mean_degree)])
