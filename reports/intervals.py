"""The uncertainty beside the figures an auditor reads first: each TPR at a fixed FPR with its
95 % interval, each AUC beside its chance line (the AUC of a distinguisher that sees only
non-private facts, where the challenge states one), and each empirical ε lower bound beside
what the run's size can certify at all.

The attack tables of the report and of the CLI are ``summary.family_rows`` with these columns
rewritten; the intervals come from the attack rows themselves (``summary`` keeps mean ± std)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from fgl_workbench.reports.summary import (
    FAMILY_COLUMNS,
    AttackSummary,
    attacks_across_seeds,
    configurations,
    family_of,
    family_rows,
    seed_interval,
)
from fgl_workbench.storage.store import AttackRow, CellRow

TPR_KEYS = ("tpr@0.1", "tpr@0.01", "tpr@0.001")
CHANCE_HEADER = "chance AUC [95% CI]"
NOT_CERTIFIABLE = "not certifiable at this size"
Table = tuple[str, list[str], list[list[str]]]


def metrics_by_row(
    cells: list[CellRow], attacks: list[AttackRow]
) -> dict[tuple[str, str], list[dict]]:
    """Each configuration × attack's metrics, one dict per seed that ran it successfully,
    keyed as ``summary.attacks_across_seeds`` labels its rows."""
    label = {c.cell_id: lab for lab, group in configurations(cells) for c in group}
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for a in attacks:
        if a.cell_id in label and a.status == "ok" and a.metrics:
            out[(label[a.cell_id], a.label)].append(a.metrics)
    return out


def with_interval(rows: list[dict], key: str, digits: int = 3) -> str:
    """The mean of ``key`` over seeds with its 95 % interval: "0.025 [0.000, 0.054]"; the
    mean alone where no interval is stated, "n/a" where no seed measured it."""
    values = [float(m[key]) for m in rows if m.get(key) is not None]
    if not values:
        return "n/a"
    text = f"{np.mean(values):.{digits}f}"
    interval = seed_interval(rows, key)
    if interval is None:
        return text
    return f"{text} [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def chance_line(rows: list[dict]) -> str | None:
    """The chance AUC with its interval where every seed's challenge states one, else None
    (nothing is shown: no chance line was computed)."""
    if not rows or any(m.get("chance_auc") is None for m in rows):
        return None
    return with_interval(rows, "chance_auc")


def lower_bound(rows: list[dict]) -> str:
    """The empirical ε lower bound (mean over seeds), or what it means when it certified
    nothing: "not certifiable at this size" where even a perfect attack could not certify
    anything on these counts, else "none certified" with the most these counts allow."""
    bounds = [float(m["epsilon_lb"]) for m in rows if m.get("epsilon_lb") is not None]
    ceilings = [
        float(m["epsilon_lb_ceiling"]) for m in rows if m.get("epsilon_lb_ceiling") is not None
    ]
    if not bounds:
        return "n/a"
    if ceilings and max(ceilings) <= 0.0:
        return NOT_CERTIFIABLE
    if certifies(rows):
        return f"{np.mean(bounds):.3f}"
    if not ceilings:
        return "none certified"
    return f"none certified (at most {min(ceilings):.2f} at this size)"


def certifies(rows: list[dict]) -> bool:
    """Whether some seed's empirical ε lower bound certified anything (is above 0)."""
    return any(float(m.get("epsilon_lb") or 0.0) > 0.0 for m in rows)


def attack_tables(cells: list[CellRow], attacks: list[AttackRow]) -> list[Table]:
    """``summary.family_rows`` of these results, with each TPR beside its 95 % interval, the
    empirical ε lower bound as ``lower_bound`` reads it, and a chance-AUC column after the
    AUC where some row of the family carries a chance line."""
    summary = attacks_across_seeds(cells, attacks)
    raw = metrics_by_row(cells, attacks)
    out = []
    for family, header, body in family_rows(summary):
        mine = [r for r in summary if family_of(r.attack) == family]
        keys = [k for k, _ in FAMILY_COLUMNS[family]]
        rows = [
            _rewritten(r, row, keys, raw.get((r.cell, r.attack), []))
            for r, row in zip(mine, body, strict=True)
        ]
        key_of = dict(zip(header[3:], keys, strict=False))  # a family's columns, by header
        stated = {k for k in TPR_KEYS if any(seed_interval(m, k) for m in raw.values())}
        header = [f"{h} [95% CI]" if key_of.get(h) in stated else h for h in header]
        lines = [chance_line(raw.get((r.cell, r.attack), [])) for r in mine]
        if "auc" in keys and any(line is not None for line in lines):
            at = 4 + keys.index("auc")  # after the AUC: the leading three name the row
            header = header[:at] + [CHANCE_HEADER] + header[at:]
            rows = [
                row[:at] + [line or "n/a"] + row[at:] for row, line in zip(rows, lines, strict=True)
            ]
        out.append((family, header, rows))
    return out


def _rewritten(r: AttackSummary, row: list[str], keys: list[str], raw: list[dict]) -> list[str]:
    row = list(row)
    for i, key in enumerate(keys):
        if key not in r.metrics:
            continue  # "n/a" or the status, as family_rows wrote it
        if key in TPR_KEYS:
            row[3 + i] = with_interval(raw, key)
        elif key == "epsilon_lb" and not certifies(raw):  # else mean ± std, as written
            row[3 + i] = lower_bound(raw)
    return row


BEST_AUC_HEADER = "best AUC"
BEST_TPR_HEADER = "best TPR@1% FPR"
LARGEST_LB_HEADER = "largest ε lb"


def strongest_with_uncertainty(
    table: tuple[list[str], list[list[str]]], cells: list[CellRow], attacks: list[AttackRow]
) -> tuple[list[str], list[list[str]]]:
    """``tradeoff.strongest_attacks``'s table (first column: the configuration) with the
    best AUC beside its chance line where stated, the best TPR at 1 % FPR beside its 95 %
    interval, and the largest ε lower bound as ``lower_bound`` reads it where no attack
    certified anything."""
    header, rows = table
    raw = metrics_by_row(cells, attacks)
    out = []
    for row in rows:
        mine = {a: m for (c, a), m in raw.items() if c == row[0]}
        row = list(row)
        best = _best(mine, "auc")
        if BEST_AUC_HEADER in header and best and (line := chance_line(mine[best])):
            row[header.index(BEST_AUC_HEADER)] += f"; chance line {line}"
        if BEST_TPR_HEADER in header and (best := _best(mine, "tpr@0.01")):
            row[header.index(BEST_TPR_HEADER)] = f"{with_interval(mine[best], 'tpr@0.01')} ({best})"
        best = _best(mine, "epsilon_lb")
        # where the largest certified nothing, say why rather than name an attack
        if LARGEST_LB_HEADER in header and best and not certifies(mine[best]):
            row[header.index(LARGEST_LB_HEADER)] = lower_bound(mine[best])
        out.append(row)
    return header, out


def _best(rows: dict[str, list[dict]], key: str) -> str | None:
    """The attack with the largest mean ``key`` over seeds, or None where none measured it."""
    means = {
        a: float(np.mean(v))
        for a, ms in rows.items()
        if (v := [m[key] for m in ms if m.get(key) is not None])
    }
    return max(means, key=means.__getitem__) if means else None
