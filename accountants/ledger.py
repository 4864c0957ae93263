"""The privacy ledger: an immutable record of the DP mechanisms a run applied.

Defenses append events as they act; ε is always computed from the ledger, never typed in.
A run with no DP defense has an empty ledger, and reports say so instead of printing ε."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PrivacyLedger:
    events: tuple[Any, ...] = ()

    def record(self, event: Any) -> PrivacyLedger:
        return PrivacyLedger(self.events + (event,))

    @property
    def is_empty(self) -> bool:
        return not self.events
