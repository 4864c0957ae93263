"""RDP → (ε, δ) and (ε → δ), minimised over a grid of orders.

Improved conversion (Balle et al. 2020; Canonne, Kamath & Steinke 2020, Prop. 12), as Opacus:
    ε(α) = ε_RDP(α) − (log δ + log α)/(α − 1) + log((α − 1)/α).
Classic conversion (Mironov 2017), for comparison:
    ε(α) = ε_RDP(α) + log(1/δ)/(α − 1).
δ for a given ε inverts the improved conversion order by order:
    log δ(α) = (α − 1)(ε_RDP(α) − ε) + (α − 1) log((α − 1)/α) − log α."""

from __future__ import annotations

from typing import Literal

import numpy as np

Conversion = Literal["improved", "classic"]


def epsilon_per_order(
    rdp: np.ndarray, orders: np.ndarray, delta: float, conversion: Conversion = "improved"
) -> np.ndarray:
    a = np.asarray(orders, dtype=float)
    if conversion == "classic":
        return rdp + np.log(1 / delta) / (a - 1)
    return rdp - (np.log(delta) + np.log(a)) / (a - 1) + np.log((a - 1) / a)


def log_delta_per_order(rdp: np.ndarray, orders: np.ndarray, epsilon: float) -> np.ndarray:
    a = np.asarray(orders, dtype=float)
    with np.errstate(invalid="ignore"):
        return (a - 1) * (rdp - epsilon) + (a - 1) * np.log((a - 1) / a) - np.log(a)


def best(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum over the last axis (orders), ignoring NaN; +inf where every order is inf/NaN."""
    values = np.where(np.isnan(values), np.inf, values)
    idx = np.argmin(values, axis=-1)
    return np.take_along_axis(values, idx[..., None], axis=-1)[..., 0], idx
