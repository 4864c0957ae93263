"""An audit row reads the same everywhere: its bounds with their ceilings, "not certifiable at
this size" where nothing could be certified, and the verdict the audit gave."""

from __future__ import annotations

from fgl_workbench.audits.demonstration import CASES, demonstrate
from fgl_workbench.audits.stored import audit_row, bound_text, holds, verdict_text

CENTRAL = next(n for n in CASES if n.startswith("dp-fedavg c"))


def test_a_row_keeps_the_audits_reading():
    (audit,) = demonstrate(CENTRAL, "same noise every round")
    row = audit_row(audit)
    assert not holds(row) and verdict_text(row) == "VIOLATED"
    assert row["ceiling"] == audit.ceiling > 0 and row["mu"] == audit.mu
    # the μ kept is the larger of the one-run and the held-out tests'
    assert row["mu"] == max(audit.bounds.mu, audit.held_out.mu)
    assert bound_text(row).startswith(f"ε ≥ {audit.lower_bound:.3f} (ceiling")


def test_a_row_that_certifies_nothing_says_so():
    (audit,) = demonstrate(CENTRAL, canaries=2)
    row = audit_row(audit)
    assert bound_text(row) == "not certifiable at this size"
    assert holds(row)
