"""The surrogate graph: the link predictor's adjacency is a weighted undirected graph without
self-loops, and a fitted surrogate matches the pooled class means."""

import numpy as np
import pytest
import torch

from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.fedgc.condensation import EdgeGenerator
from fgl_workbench.targets.opfgl.statistics import Pooled
from fgl_workbench.targets.opfgl.surrogate import (
    SurrogateConfig,
    build_surrogate,
    links,
    propagate_dense,
    surrogate_sizes,
)


def test_link_predictor_gives_a_symmetric_weighted_adjacency_without_loops():
    torch.manual_seed(0)
    adj = links(EdgeGenerator(5, 16), torch.randn(9, 5), threshold=0.3).detach()
    assert torch.allclose(adj, adj.T) and not adj.diagonal().any()
    assert float(adj.min()) >= 0 and float(adj.max()) <= 1
    assert not ((adj > 0) & (adj < 0.3)).any()


def test_a_fitted_surrogate_matches_the_class_means():
    # statistics some 3-node graph realises: a node per class, nodes 0 and 1 linked
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    linked = torch.tensor([[0.0, 0.8, 0.0], [0.8, 0.0, 0.0], [0.0, 0.0, 0.0]])
    means = propagate_dense(x, linked, 1).double().numpy()
    target = Pooled(np.array([10.0, 20.0, 30.0]), means, np.ones((3, 8)))
    cfg = SurrogateConfig(iterations=1000, lr_features=0.05)
    g = build_surrogate(target, np.array([3, 6, 9]), 4, 1, cfg, torch.Generator().manual_seed(0))
    assert g.x.shape == (3, 4) and g.y.tolist() == [0, 1, 2]
    adj = torch.zeros(3, 3)
    adj[g.edge_index[0], g.edge_index[1]] = g.edge_weight
    h = propagate_dense(g.x, adj, 1)
    err = ((h - torch.from_numpy(means).float()) ** 2).mean(1)
    assert (err < 1e-3).all() and g.alignment < 1e-3


def test_surrogate_sizes_follow_the_rate_and_the_cap():
    cfg = SurrogateConfig(rate=0.1, max_nodes=10)
    sizes = surrogate_sizes(np.zeros(3), np.array([5, 40, 100]), cfg)
    assert sizes.sum() == 10 and (sizes >= 1).all()
    with pytest.raises(ConfigError, match="max_nodes"):
        surrogate_sizes(np.zeros(4), np.ones(4), SurrogateConfig(max_nodes=3))
