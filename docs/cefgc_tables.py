"""CeFGC's Table 2 reproduction from the results store of examples/reproduction/
cefgc-table2.yaml: global-model AUC per dataset and method, and the membership attacks' AUC,
as markdown (mean ± standard deviation over seeds).

    .venv/bin/python docs/cefgc_tables.py runs/cefgc-table2
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from tables import fmt, load

from workbench.store import CellRow

PAPER = {  # Table 2, single-dataset, 3 clients: CeFGC, CeFGC*, FedAvg
    "MUTAG": (0.91, 0.90, 0.78),
    "PROTEINS": (0.87, 0.87, 0.83),
    "IMDB-BINARY": (0.81, 0.85, 0.80),
}
METHODS = ("CeFGC", "CeFGC*", "FedAvg")


def method(cell: CellRow) -> str:
    target = cell.config["target"]
    if target["name"] == "fedavg":
        return "FedAvg"
    return "CeFGC*" if (target.get("params") or {}).get("label_channel") else "CeFGC"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stores", nargs="+")
    cells, attacks = load(parser.parse_args().stores)
    auc: dict[tuple[str, str], list[float]] = defaultdict(list)
    mia: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for c in cells:
        key = (c.config["dataset"]["name"], method(c))
        auc[key].append(c.utility["auc"])
        for a in attacks[c.cell_id]:
            if a.status == "ok":
                mia[(*key, a.attack)].append(a.metrics["auc"])
    print("| dataset | " + " | ".join(f"{m} (paper) | {m} (ours)" for m in METHODS) + " |")
    print("|---" * (1 + 2 * len(METHODS)) + "|")
    for ds, paper in PAPER.items():
        row = [
            f"{p:.2f} | {fmt(auc[(ds, m)], 1.0, 3)}" for m, p in zip(METHODS, paper, strict=True)
        ]
        print(f"| {ds} | " + " | ".join(row) + " |")
    print("\n| dataset | method | MIA on the GIN (loss threshold) | MIA on generators (DSM loss) |")
    print("|---|---|---|---|")
    for ds in PAPER:
        for m in METHODS:
            gin = fmt(mia[(ds, m, "mia-threshold")], 1.0, 3)
            gen = fmt(mia[(ds, m, "mia-generator-loss")], 1.0, 3)
            print(f"| {ds} | {m} | {gin} | {gen} |")


if __name__ == "__main__":
    main()
