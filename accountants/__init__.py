"""Privacy accounting: pure math in ``analysis`` apart from the stateful ledger."""

from accountants.ledger import PrivacyLedger

__all__ = ["PrivacyLedger"]
