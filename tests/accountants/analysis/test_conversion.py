import numpy as np

from fgl_workbench.accountants.analysis import conversion
from fgl_workbench.accountants.analysis.orders import EXTENDED_ORDERS, OPACUS_ORDERS, resolve_orders


def test_opacus_grid_is_reproduced_exactly():
    from opacus.accountants import RDPAccountant

    assert OPACUS_ORDERS.tolist() == list(RDPAccountant.DEFAULT_ALPHAS)
    assert set(OPACUS_ORDERS) <= set(EXTENDED_ORDERS)
    assert EXTENDED_ORDERS.max() >= 1000 and EXTENDED_ORDERS.min() < 1.1


def test_improved_conversion_is_tighter_than_classic():
    rdp = np.linspace(0.01, 5, OPACUS_ORDERS.size)
    improved = conversion.epsilon_per_order(rdp, OPACUS_ORDERS, 1e-5, "improved")
    classic = conversion.epsilon_per_order(rdp, OPACUS_ORDERS, 1e-5, "classic")
    assert (improved < classic).all()


def test_delta_inverts_epsilon_order_by_order():
    rdp = np.linspace(0.1, 3, OPACUS_ORDERS.size)
    eps = conversion.epsilon_per_order(rdp, OPACUS_ORDERS, 1e-6)
    for k in (0, 40, 140):
        log_d = conversion.log_delta_per_order(rdp[k : k + 1], OPACUS_ORDERS[k : k + 1], eps[k])
        assert np.exp(log_d[0]) == np.float64(1e-6) or abs(np.exp(log_d[0]) / 1e-6 - 1) < 1e-9


def test_best_ignores_nan_and_reports_inf():
    values = np.array([[np.nan, 2.0, 1.0], [np.inf, np.nan, np.inf]])
    best, idx = conversion.best(values)
    assert best.tolist() == [1.0, np.inf] and idx[0] == 2


def test_bad_orders_are_rejected():
    import pytest

    with pytest.raises(ValueError, match="orders"):
        resolve_orders("huge")
    with pytest.raises(ValueError, match="orders"):
        resolve_orders([0.5, 2])
