import numpy as np
import pytest

from reports.plots import FPR_GRID, dp_tpr_ceiling, mean_roc


def test_dp_ceiling_is_the_hypothesis_testing_bound():
    fpr = np.array([0.0, 0.01, 0.5, 1.0])
    eps, delta = 1.0, 1e-5
    ceiling = dp_tpr_ceiling(fpr, eps, delta)
    assert ceiling[0] == pytest.approx(delta)
    assert ceiling[1] == pytest.approx(np.e * 0.01 + delta)
    assert ceiling[2] == pytest.approx(1 - np.exp(-1) * (0.5 - delta))
    assert ceiling[3] == 1.0
    # ε = 0 and δ = 0: no test beats chance
    assert np.allclose(dp_tpr_ceiling(FPR_GRID, 0.0, 0.0), FPR_GRID)
    # a huge ε does not overflow
    assert np.all(dp_tpr_ceiling(FPR_GRID, 1e4, delta) == 1.0)


def test_mean_roc_averages_vertically_on_the_grid():
    a = (np.array([0.0, 1.0]), np.array([0.0, 1.0]))
    b = (np.array([0.0, 1e-4, 1.0]), np.array([0.0, 1.0, 1.0]))
    fpr, tpr = mean_roc([a, b])
    assert np.array_equal(fpr, FPR_GRID)
    assert tpr[-1] == 1.0
    assert tpr[0] == pytest.approx((1e-4 + 1.0) / 2)
