"""Grids of Rényi orders α.

``OPACUS_ORDERS`` reproduces Opacus's ``RDPAccountant.DEFAULT_ALPHAS`` exactly, so ε agrees with
Opacus to rounding. ``EXTENDED_ORDERS`` adds orders just above 1 and far larger ones: small-ε
regimes (large σ, few steps, small q) are optimised at α in the hundreds, beyond Opacus's 63."""

from __future__ import annotations

import numpy as np

OPACUS_ORDERS = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)), dtype=float)

EXTENDED_ORDERS = np.unique(
    np.concatenate(
        [
            1 + np.arange(1, 10) / 100.0,
            OPACUS_ORDERS,
            [64, 72, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 1024],
        ]
    )
)


def resolve_orders(orders: str | np.ndarray | list[float]) -> np.ndarray:
    if isinstance(orders, str):
        grids = {"opacus": OPACUS_ORDERS, "extended": EXTENDED_ORDERS}
        if orders not in grids:
            raise ValueError(
                f"orders: expected one of {', '.join(grids)} or a list (got {orders!r})"
            )
        return grids[orders]
    arr = np.asarray(orders, dtype=float)
    if arr.ndim != 1 or arr.size == 0 or (arr <= 1).any() or not np.isfinite(arr).all():
        raise ValueError("orders: expected a non-empty list of finite numbers > 1")
    return np.sort(arr)
