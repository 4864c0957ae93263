"""FedGC's reproduction tables from the results stores of the three suites in
examples/reproduction/ (fedgc-table1, fedgc-table2, fedgc-gamma): mean ± standard deviation
over seeds, as markdown.

    .venv/bin/python docs/fedgc_tables.py runs/fedgc-table1 runs/fedgc-table2 runs/fedgc-gamma
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from tables import fmt, load

from fgl_workbench.storage.store import AttackRow, CellRow

MIAS = [  # (attack, features) columns of Table 2 and the γ curve
    ("mia-shadow", "raw"),
    ("mia-shadow", "ib-surrogate"),
    ("mia-threshold", "raw"),
    ("mia-threshold", "ib-surrogate"),
    ("mia-lira", "raw"),
    ("mia-lira", "ib-surrogate"),
    ("mia-rmia", "raw"),
    ("mia-rmia", "ib-surrogate"),
]


def gamma(cell: CellRow) -> float | None:
    for d in cell.config["target"].get("defenses", []):
        if d["name"] == "information-bottleneck":
            return float(d.get("params", {}).get("gamma", 5e-4))
    return None


def auc(rows: list[AttackRow], name: str, features: str) -> float | None:
    for a in rows:
        if a.attack == name and a.params.get("features", "raw") == features and a.status == "ok":
            return a.metrics["auc"]
    return None


def table1(cells: list[CellRow]) -> None:
    """FedGC without the IB by ratio, and the reference targets on the same federation."""
    groups: dict[tuple, list[CellRow]] = defaultdict(list)
    for c in cells:
        if gamma(c) is None:
            target = c.config["target"]
            ratio = target["params"].get("ratio", "–")
            groups[(c.config["dataset"]["name"], target["name"], str(ratio))].append(c)
    print("| dataset | target | ratio | seeds | accuracy | G' alone | N' | best round |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (ds, target, ratio), cs in sorted(groups.items()):
        u = [c.utility for c in cs]
        condensed = target == "fedgc"
        print(
            f"| {ds} | {target} | {ratio} | {len(cs)} | {fmt([x['accuracy'] for x in u])} | "
            + (
                f"{fmt([x['condensed_accuracy'] for x in u])} | "
                f"{np.mean([x['condensed_nodes'] for x in u]):.0f} | "
                if condensed
                else "– | – | "
            )
            + f"{np.mean([x['best_round'] for x in u]):.0f} |"
        )


def mia_table(cells: list[CellRow], attacks: dict[str, list[AttackRow]], by: str) -> None:
    groups: dict[tuple, list[CellRow]] = defaultdict(list)
    for c in cells:
        if c.config["target"]["params"].get("ratio") != 0.5:
            continue
        g = gamma(c)
        key = (c.config["dataset"]["name"], "no IB" if g is None else f"IB γ={g:g}")
        groups[key].append(c)
    head = " | ".join(
        f"{n.removeprefix('mia-')} {'adaptive' if f != 'raw' else 'raw'}" for n, f in MIAS
    )
    print(f"| dataset | {by} | seeds | accuracy | KL (nats) | {head} | inversion cos (prior) |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(MIAS) + "---:|")
    for (ds, setting), cs in sorted(groups.items()):
        aucs = [
            fmt([v for c in cs if (v := auc(attacks[c.cell_id], n, f)) is not None])
            for n, f in MIAS
        ]
        inv = [
            (a.metrics["cosine"], a.metrics["cosine_baseline"])
            for c in cs
            for a in attacks[c.cell_id]
            if a.attack == "class-gradient-inversion" and a.status == "ok"
        ]
        kl = [c.utility["ib_kl_nats"] for c in cs if "ib_kl_nats" in c.utility]
        inversion = (
            f"{fmt([i[0] for i in inv], 1, 2)} ({fmt([i[1] for i in inv], 1, 2)})" if inv else "–"
        )
        print(
            f"| {ds} | {setting} | {len(cs)} | {fmt([c.utility['accuracy'] for c in cs])} | "
            f"{fmt(kl, 1)} | " + " | ".join(aucs) + f" | {inversion} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    cells, attacks = load(args.runs)
    print("## Table 1: accuracy (%) by condensation ratio, no IB\n")
    table1(cells)
    print("\n## Table 2 and the γ curve: accuracy (%), membership AUC (%), inversion cosine\n")
    mia_table(cells, attacks, "setting")


if __name__ == "__main__":
    main()
