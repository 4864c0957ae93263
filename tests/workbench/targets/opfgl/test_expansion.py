"""Label propagation's bounds, HRE's three criteria, and the distillation weights."""

import numpy as np
import torch

from fgl_workbench.targets.opfgl.expansion import (
    ExpansionConfig,
    class_homophily,
    distillation_weights,
    label_propagation,
    reliable_nodes,
)


def two_cliques():
    """Nodes 0-4 (class 0) and 5-9 (class 1), each a clique, one bridge 4-5; node 10 alone."""
    edges = [(i, j) for i in range(5) for j in range(5) if i != j]
    edges += [(i, j) for i in range(5, 10) for j in range(5, 10) if i != j]
    edges += [(4, 5), (5, 4)]
    y = torch.tensor([0] * 5 + [1] * 5 + [0])
    labelled = torch.zeros(11, dtype=torch.bool)
    labelled[[0, 1, 2, 5, 6]] = True
    return torch.tensor(edges).T, y, labelled


def test_propagation_stays_in_bounds_keeps_labels_and_spreads_uniform_to_the_unreached():
    edge_index, y, labelled = two_cliques()
    lp = label_propagation(edge_index, 11, y, labelled, 3, iters=2, alpha=0.9)
    assert float(lp.min()) >= 0.0 and float(lp.max()) <= 1.0
    assert (lp[labelled].argmax(1) == y[labelled]).all()
    assert torch.allclose(lp[10], torch.full((3,), 1 / 3))  # no labelled node within reach
    assert lp[3].argmax() == 0 and lp[8].argmax() == 1


def test_reliable_nodes_meet_every_criterion_and_never_relabel_training_nodes():
    edge_index, y, labelled = two_cliques()
    lp = label_propagation(edge_index, 11, y, labelled, 2, iters=2, alpha=0.9)
    hom = class_homophily(edge_index, y, labelled, 2)
    assert hom.tolist() == [3.0, 2.0]  # a sum over labelled nodes: class 0 has three
    deg = np.bincount(edge_index[0].numpy(), minlength=11)
    cfg = ExpansionConfig(tau=0.9, min_degree=4, topk=1)
    grown = reliable_nodes(lp, deg, ~labelled.numpy(), hom, cfg)
    p = (lp / lp.sum(1, keepdim=True)).numpy()
    assert grown.nodes.size and not labelled.numpy()[grown.nodes].any()
    assert (deg[grown.nodes] >= 4).all() and (p[grown.nodes].max(1) >= 0.9).all()
    assert set(grown.labels.tolist()) == {0}  # the top class by h_c only
    assert (
        reliable_nodes(
            lp, deg, ~labelled.numpy(), hom, cfg.model_copy(update={"topk": 0})
        ).nodes.size
        == 0
    )


def test_minor_classes_get_larger_distillation_weights_within_the_bounds():
    hom = np.array([0.0, 1.0, 10.0, 100.0])
    delta = 1 / (1 + np.log1p(hom))
    assert (np.diff(delta) < 0).all()
    lp = torch.eye(4)
    w = distillation_weights(lp, hom, scale=0.2, low=0.01, high=0.15)
    assert (w >= 0.01).all() and (w <= 0.15).all()
    assert (np.diff(w.numpy()) <= 0).all() and w[0] > w[3]
