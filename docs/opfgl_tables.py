"""O-pFGL's main-table reproduction from the results stores of examples/reproduction/
opfgl-cora.yaml and opfgl-citeseer.yaml: accuracy and macro-F1 over every class (absent
classes score 0, as the paper's), client-weighted, mean ± standard deviation over seeds, beside
the paper's; and the attack table of examples/attacks/opfgl.yaml.

    .venv/bin/python docs/opfgl_tables.py runs/opfgl-cora runs/opfgl-citeseer
    .venv/bin/python docs/opfgl_tables.py --attacks runs/opfgl-attacks
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from tables import fmt, load

from workbench.store import CellRow

ONE_ROUND = "FedAvg, one round (paper: + fine-tuning; ours: none)"
HUNDRED_ROUNDS = "FedAvg, 100 rounds (paper: Table 8)"
PAPER = {  # Louvain+, 10 clients: (accuracy, F1) in %; Table 1, and Table 8 (100 rounds)
    "Cora": {
        "Standalone": (67.17, 41.79),
        ONE_ROUND: (69.68, 45.10),
        HUNDRED_ROUNDS: (75.27, 61.74),
        "O-pFGL": (76.43, 61.58),
    },
    "CiteSeer": {
        "Standalone": (59.82, 42.70),
        ONE_ROUND: (63.92, 45.97),
        HUNDRED_ROUNDS: (67.11, 51.86),
        "O-pFGL": (71.61, 58.24),
    },
}
ROWS = (
    "Standalone",
    HUNDRED_ROUNDS,
    ONE_ROUND,
    "O-pFGL",
    "O-pFGL, λ = 0 (plain fine-tuning)",
    "O-pFGL stage 1 only (same cells)",
)


HEADLINES = (  # (metric, its baseline) of the non-membership families
    ("tv_mean", "tv_baseline"),
    ("cosine", "cosine_baseline"),
    ("accuracy", "accuracy_baseline"),
)


def rows(cell: CellRow) -> list[tuple[str, str]]:
    """(row, utility prefix) pairs a cell contributes to the table."""
    target = cell.config["target"]
    params = target.get("params") or {}
    if target["name"] == "fedavg":
        return [(ONE_ROUND if params.get("rounds") == 1 else HUNDRED_ROUNDS, "")]
    if params.get("mode") == "standalone":
        return [("Standalone", "")]
    if params.get("distill_scale") == 0.0:
        return [("O-pFGL, λ = 0 (plain fine-tuning)", "")]
    return [("O-pFGL", ""), ("O-pFGL stage 1 only (same cells)", "stage1_")]


def utility_table(paths: list[str]) -> None:
    cells, _ = load(paths)
    acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    f1: dict[tuple[str, str], list[float]] = defaultdict(list)
    for c in cells:
        ds = c.config["dataset"]["name"]
        for row, prefix in rows(c):
            acc[(ds, row)].append(c.utility[f"{prefix}accuracy"])
            f1[(ds, row)].append(c.utility[f"{prefix}macro_f1_all"])
    print(
        "| method | "
        + " | ".join(f"{d} acc (paper) | {d} acc | {d} F1 (paper) | {d} F1" for d in PAPER)
        + " |"
    )
    print("|---" * (1 + 4 * len(PAPER)) + "|")
    for row in ROWS:
        cols = []
        for ds, paper in PAPER.items():
            p = paper.get(row)
            pa, pf = (f"{p[0]:.2f}", f"{p[1]:.2f}") if p else ("–", "–")
            cols.append(f"{pa} | {fmt(acc[(ds, row)])} | {pf} | {fmt(f1[(ds, row)])}")
        print(f"| {row} | " + " | ".join(cols) + " |")


def defence(cell: CellRow) -> str:
    target = cell.config["target"]
    params = target.get("params") or {}
    names = [
        d["name"] + "".join(f" {k}={v}" for k, v in (d.get("params") or {}).items())
        for d in target.get("defenses") or []
    ]
    if params.get("min_count"):
        names.append(f"min_count={params['min_count']}")
    if params.get("release") == "stage1":
        names.append("stage-1 models released")
    if params.get("statistics_from") == "validation":
        names.append("statistics of validation nodes (no member uploaded)")
    return ", ".join(names) or "none (in the clear)"


def attack_table(paths: list[str]) -> None:
    cells, attacks = load(paths)
    columns: list[str] = []
    for c in cells:
        for a in attacks[c.cell_id]:
            key = a.attack + (" " + json.dumps(a.params, sort_keys=True) if a.params else "")
            if key not in columns:
                columns.append(key)
    print("| defence | ε | accuracy | " + " | ".join(columns) + " |")
    print("|---" * (3 + len(columns)) + "|")
    for c in cells:
        found = {
            a.attack + (" " + json.dumps(a.params, sort_keys=True) if a.params else ""): a
            for a in attacks[c.cell_id]
        }
        out = []
        for key in columns:
            a = found.get(key)
            if a is None or a.status != "ok":
                out.append("n/a")
            elif "auc" in a.metrics:
                out.append(f"{a.metrics['auc']:.3f}")
            else:  # the family's headline figure beside its no-attack baseline
                metric, base = next(
                    (m, b) for m, b in HEADLINES if m in a.metrics and b in a.metrics
                )
                out.append(f"{metric} {a.metrics[metric]:.3f} ({a.metrics[base]:.3f})")
        eps = "∞" if c.epsilon is None else f"{c.epsilon:.2f}"
        print(
            f"| {defence(c)} | {eps} | {100 * c.utility['accuracy']:.1f} | "
            + " | ".join(out)
            + " |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stores", nargs="+")
    parser.add_argument("--attacks", action="store_true", help="the attack table")
    args = parser.parse_args()
    (attack_table if args.attacks else utility_table)(args.stores)


if __name__ == "__main__":
    main()
