"""O-pFGL's main-table reproduction from the results stores of examples/reproduction/
opfgl-cora.yaml and opfgl-citeseer.yaml (Louvain+, 10 clients), -20.yaml (20 clients) and
-metis.yaml (Metis+, 10 and 20): accuracy and macro-F1 over every class (absent
classes score 0, as the paper's), client-weighted, mean ± standard deviation over seeds, beside
the paper's; the 100-round FedAvg also scored OpenFGL's way (opfgl-fedavg-openfgl-scoring.yaml:
pass its store alone, as its cells repeat the suites' 100-round ones); and the attack table of
examples/attacks/opfgl.yaml.

    .venv/bin/python docs/opfgl_tables.py runs/opfgl-cora runs/opfgl-citeseer
    .venv/bin/python docs/opfgl_tables.py --attacks runs/opfgl-attacks
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from tables import fmt, load

from fgl_workbench.storage.store import CellRow

ONE_ROUND = "FedAvg, one round + fine-tuning"
ONE_ROUND_GLOBAL = "FedAvg, one round, global model (no fine-tuning)"
HUNDRED_ROUNDS = "FedAvg, 100 rounds (paper: Table 8 or 9)"
HUNDRED_ROUNDS_LOCAL = "FedAvg, 100 rounds, clients' local models (OpenFGL's scoring)"
# (accuracy, F1) in % per partition (method, clients), dataset and row: Tables 1 and 8
# (Louvain+, 10), 4 (Louvain+, 20), 5 and 9 (Metis+, 10), 7 (Metis+, 20). The paper runs its
# one-round FedAvg everywhere and the 100-round one only with 10 clients.
PAPER = {
    ("louvain-plus", 10): {
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
    },
    ("louvain-plus", 20): {
        "Cora": {
            "Standalone": (61.57, 30.35),
            ONE_ROUND: (63.21, 31.77),
            "O-pFGL": (69.84, 49.37),
        },
        "CiteSeer": {
            "Standalone": (57.86, 36.44),
            ONE_ROUND: (61.51, 40.60),
            "O-pFGL": (68.69, 50.26),
        },
    },
    ("metis-plus", 10): {
        "Cora": {
            "Standalone": (75.15, 31.00),
            ONE_ROUND: (76.18, 31.42),
            HUNDRED_ROUNDS: (77.10, 45.59),
            "O-pFGL": (81.79, 50.85),
        },
        "CiteSeer": {
            "Standalone": (64.72, 37.36),
            ONE_ROUND: (66.51, 35.89),
            HUNDRED_ROUNDS: (67.30, 42.88),
            "O-pFGL": (72.76, 50.94),
        },
    },
    ("metis-plus", 20): {
        "Cora": {
            "Standalone": (71.57, 20.89),
            ONE_ROUND: (73.14, 18.38),
            "O-pFGL": (78.31, 37.21),
        },
        "CiteSeer": {
            "Standalone": (61.36, 26.19),
            ONE_ROUND: (62.62, 28.48),
            "O-pFGL": (68.88, 41.95),
        },
    },
}
DATASETS = ("Cora", "CiteSeer")
ROWS = (
    "Standalone",
    HUNDRED_ROUNDS,
    HUNDRED_ROUNDS_LOCAL,
    ONE_ROUND,
    ONE_ROUND_GLOBAL,
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
        epochs = params.get("local_epochs", 3)
        if params.get("rounds") != 1:
            suffix = "" if epochs == 3 else swept(epochs)
            scored = [(HUNDRED_ROUNDS + suffix, "")]
            if params.get("score_local_models"):  # the same cells scored OpenFGL's way too
                scored.append((HUNDRED_ROUNDS_LOCAL + suffix, "local_"))
            return scored
        suffix = "" if epochs == 100 else swept(epochs)
        if params.get("fine_tune"):  # the personalised models, and the global one before them
            return [(ONE_ROUND + suffix, ""), (ONE_ROUND_GLOBAL + suffix, "global_")]
        return [(ONE_ROUND_GLOBAL + suffix, "")]
    if params.get("mode") == "standalone":
        return [("Standalone", "")]
    if params.get("distill_scale") == 0.0:
        return [("O-pFGL, λ = 0 (plain fine-tuning)", "")]
    return [("O-pFGL", ""), ("O-pFGL stage 1 only (same cells)", "stage1_")]


def swept(epochs: int) -> str:
    """The row suffix of a setting of the local-epoch sweep."""
    return f" ({epochs} local epoch{'' if epochs == 1 else 's'})"


def sweep_order(row: str) -> tuple[int, str]:
    """Rows of the local-epoch sweep by their epochs, then by name."""
    epochs = row.rsplit("(", 1)[-1].split(" ", 1)[0]
    return (int(epochs) if epochs.isdigit() else 0, row)


def utility_table(paths: list[str]) -> None:
    """One table per partition (method and client count) found in the stores."""
    cells, _ = load(paths)
    acc: dict[tuple, list[float]] = defaultdict(list)
    f1: dict[tuple, list[float]] = defaultdict(list)
    for c in cells:
        part = (c.config["partition"]["method"], c.config["partition"]["num_clients"])
        ds = c.config["dataset"]["name"]
        for row, prefix in rows(c):
            acc[(part, ds, row)].append(c.utility[f"{prefix}accuracy"])
            f1[(part, ds, row)].append(c.utility[f"{prefix}macro_f1_all"])
    for part in sorted({k[0] for k in acc}):
        paper = PAPER.get(part, {})
        print(f"\n**{part[0]}, {part[1]} clients**\n")
        print(
            "| method | "
            + " | ".join(f"{d} acc (paper) | {d} acc | {d} F1 (paper) | {d} F1" for d in DATASETS)
            + " |"
        )
        print("|---" * (1 + 4 * len(DATASETS)) + "|")
        sweep_rows = sorted({k[2] for k in acc if k[0] == part} - set(ROWS), key=sweep_order)
        for row in (*ROWS, *sweep_rows):
            if not any((part, ds, row) in acc or paper.get(ds, {}).get(row) for ds in DATASETS):
                continue
            cols = []
            for ds in DATASETS:
                # the local models' row is a scoring of the paper's 100-round baseline
                p = paper.get(ds, {}).get(HUNDRED_ROUNDS if row == HUNDRED_ROUNDS_LOCAL else row)
                pa, pf = (f"{p[0]:.2f}", f"{p[1]:.2f}") if p else ("–", "–")
                ours_acc, ours_f1 = fmt(acc[(part, ds, row)]), fmt(f1[(part, ds, row)])
                cols.append(f"{pa} | {ours_acc} | {pf} | {ours_f1}")
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
