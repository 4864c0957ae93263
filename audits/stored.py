"""A canary audit as the results store keeps it, and how it reads back: one row of
``workbench.store.AUDIT_COLUMNS`` per audited claim, read the same way by the CLI, the report
and the verdict."""

from __future__ import annotations

from typing import Any

from fgl_workbench.audits.canary import CanaryAudit


def audit_row(a: CanaryAudit) -> dict[str, Any]:
    """One canary audit as the store keeps it."""
    b = a.bounds
    return {
        "defense": a.defense,
        "adversaries": "/".join(a.adversaries),
        "unit": a.unit,
        "mechanism": a.mechanism,
        "claimed": a.claimed,
        "lower_bound": a.lower_bound,
        "confidence": a.confidence,
        "delta": b.delta,
        "canaries": b.canaries,
        "guesses": b.steinke.guesses,
        "correct": b.steinke.correct,
        "seconds": a.seconds,
        "ceiling": a.ceiling,
        "fdp_epsilon": b.fdp_epsilon,
        "mu": a.mu,
        "mu_ceiling": a.mu_ceiling,
        "holds": int(a.holds),
    }


def holds(row: dict[str, Any]) -> bool:
    """The row's verdict: its ``holds`` (the claim's profile not rejected and no bound above
    the claim), or in a folder written before that column, bound ≤ claim."""
    if row.get("holds") is not None:
        return bool(row["holds"])
    return row["lower_bound"] <= row["claimed"]


def bound_text(row: dict[str, Any]) -> str:
    """ "ε ≥ x (ceiling c)", with μ where measured; "not certifiable at this size" where even
    every guess right would certify nothing (a 0 there is no measurement)."""
    ceiling = row.get("ceiling")
    if ceiling is not None and ceiling <= 0:
        return "not certifiable at this size"
    text = f"ε ≥ {row['lower_bound']:.3f}"
    if ceiling is not None:
        text += f" (ceiling {ceiling:.2f})"
    if row.get("mu") is not None:
        text += f", μ ≥ {row['mu']:.3f} (ceiling {row['mu_ceiling']:.2f})"
    return text


def verdict_text(row: dict[str, Any]) -> str:
    return "holds" if holds(row) else "VIOLATED"
