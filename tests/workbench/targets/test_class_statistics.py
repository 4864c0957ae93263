"""Class statistics: counts, means and unbiased stds of [X ‖ ÂX], withheld below min_count."""

import numpy as np
import torch

from fgl_workbench.targets.class_statistics import ClassStatistics, class_statistics, propagate


def test_statistics_of_a_path_graph_by_hand():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # 0 – 1 – 2, node 3 alone
    labels = np.array([0, 0, 1, 2])
    stats = class_statistics(x, edges, labels, np.ones(4, bool), 3, hops=1, min_count=2)
    assert stats.counts.tolist() == [2, 0, 0]  # classes 1 and 2 have one node: withheld
    h = propagate(x.double(), edges, 1).numpy()
    # Â with self-loops: degrees 2, 3, 2, 1; row 0 of ÂX = x0/2 + x1/√6
    assert np.allclose(h[0, 2:], x[0].numpy() / 2 + x[1].numpy() / np.sqrt(6))
    assert np.allclose(h[3, 2:], x[3].numpy())
    assert np.allclose(stats.means[0], h[:2].mean(0))
    assert np.allclose(stats.stds[0], h[:2].std(0, ddof=1))
    assert not stats.means[1:].any() and not stats.stds[1:].any()


def test_payload_round_trip():
    stats = ClassStatistics(np.array([2, 3]), np.ones((2, 4)), np.zeros((2, 4)), 2)
    back = ClassStatistics.from_payload(stats.as_payload())
    assert back.num_features == 2 and np.array_equal(back.counts, stats.counts)
    assert np.array_equal(back.means, stats.means)
