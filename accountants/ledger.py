"""The privacy ledger: an immutable record of the DP mechanisms a run applied.

Defenses append events as they act; ε is always computed from the ledger, never typed in.
A run with no DP defense has an empty ledger, and reports say so instead of printing ε."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fgl_workbench.accountants.events import Event


@dataclass(frozen=True)
class PrivacyLedger:
    events: tuple[Event, ...] = ()

    def record(self, event: Event) -> PrivacyLedger:
        return PrivacyLedger(self.events + (event,))

    @property
    def is_empty(self) -> bool:
        return not self.events

    def standard(self) -> PrivacyLedger:
        """The events protecting neighbouring datasets (everything but metric-DP)."""
        return PrivacyLedger(tuple(e for e in self.events if not e.metric))

    def metric(self) -> PrivacyLedger:
        """The metric-DP events (embedding releases, accounted at a distance ρ)."""
        return PrivacyLedger(tuple(e for e in self.events if e.metric))

    def rdp(self, orders: np.ndarray, rho: float | None = None) -> np.ndarray:
        """The composed RDP curve: the sum of every event's curve."""
        if not self.events:
            raise ValueError("the ledger holds no events: nothing was made differentially private")
        kinds = {e.metric for e in self.events}
        if len(kinds) > 1:
            raise ValueError(
                "the ledger mixes metric-DP and standard DP events, which protect different "
                "neighbouring relations; account ledger.standard() and ledger.metric() apart"
            )
        return sum(e.rdp(orders, rho) for e in self.events)
