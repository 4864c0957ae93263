"""CeFGC's Table 2 reproduction from the results stores of examples/reproduction/
cefgc-table2.yaml, cefgc-across-dataset.yaml, cefgc-across-domain.yaml, cefgc-budget.yaml and
cefgc-gpu-budget.yaml (a GPU run): global-model AUC per dataset (per member in the mixtures)
and method beside the paper's, what the generator budget changes, FedAvg against the
centralised GIN (cefgc-*centralized.yaml), FedAvg with GCFL's sharing (each client's input and
readout layers its own) against FedAvg, and the membership attacks' AUC, as markdown (mean ±
population standard deviation over seeds).

    cd docs && ../.venv/bin/python cefgc_tables.py ../runs/cefgc-table2 ../runs/cefgc-budget \
        ../runs/cefgc-gpu-budget
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from tables import fmt, load

from fgl_workbench.storage.store import CellRow
from fgl_workbench.targets.fedavg import FedAvgConfig

PAPER = {  # Table 2 (CeFGC, CeFGC*, FedAvg): single dataset, 3 clients
    "MUTAG": (0.91, 0.90, 0.78),
    "ENZYMES": (0.68, 0.69, 0.55),
    "PROTEINS": (0.87, 0.87, 0.83),
    "IMDB-BINARY": (0.81, 0.85, 0.80),
    "IMDB-MULTI": (0.76, 0.77, 0.75),
}
ACROSS = {  # across-dataset (Protein, Social) and across-domain (Mix) columns, per member
    ("ENZYMES+PROTEINS", "ENZYMES"): (0.75, 0.79, 0.73),
    ("ENZYMES+PROTEINS", "PROTEINS"): (0.89, 0.86, 0.88),
    ("IMDB-BINARY+IMDB-MULTI", "IMDB-BINARY"): (0.80, 0.79, 0.72),
    ("IMDB-BINARY+IMDB-MULTI", "IMDB-MULTI"): (0.79, 0.78, 0.77),
    ("MUTAG+ENZYMES+IMDB-BINARY+IMDB-MULTI", "MUTAG"): (0.88, 0.92, 0.76),
    ("MUTAG+ENZYMES+IMDB-BINARY+IMDB-MULTI", "ENZYMES"): (0.80, 0.79, 0.71),
    ("MUTAG+ENZYMES+IMDB-BINARY+IMDB-MULTI", "IMDB-BINARY"): (0.80, 0.80, 0.77),
    ("MUTAG+ENZYMES+IMDB-BINARY+IMDB-MULTI", "IMDB-MULTI"): (0.80, 0.80, 0.69),
}
METHODS = ("CeFGC", "CeFGC*", "FedAvg")
CENTRALISED = "centralised GIN"  # the upper reference: the same GIN on the pooled graphs
GCFL = "FedAvg, GCFL's sharing"  # input and readout layers kept by each client (keep_local)


def method(cell: CellRow) -> str:
    target = cell.config["target"]
    params = target.get("params") or {}
    if target["name"] == "centralized":
        return CENTRALISED
    if target["name"] == "fedavg":
        epochs = FedAvgConfig(**params).local_epochs
        name = GCFL if params.get("keep_local") else "FedAvg"
        if epochs != 1:  # the Table 2 rows run one local epoch a round
            return f"{name} ({epochs} local epochs)"
        if params.get("release") == "last":
            return f"{name} (last round released)"
        return name
    name = "CeFGC*" if params.get("label_channel") else "CeFGC"
    generator = params.get("generator", {})
    budget = (generator.get("epochs"), generator.get("steps"))
    return name if budget == (10, 50) else f"{name} ({budget[0]} epochs, {budget[1]} steps)"


DISJOINT = " (disjoint features)"  # a mixture whose members have columns of their own


def dataset(cell: CellRow) -> str:
    d = cell.config["dataset"]
    params = d.get("params") or {}
    members = params.get("members")
    if not members:
        return d["name"]
    return "+".join(members) + (DISJOINT if params.get("features") == "disjoint" else "")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stores", nargs="+")
    cells, attacks = load(parser.parse_args().stores)
    auc: dict[tuple[str, str], list[float]] = defaultdict(list)
    mia: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for c in cells:
        key = (dataset(c), method(c))
        auc[key].append(c.utility["auc"])
        for name, value in c.utility.items():
            if name.startswith("auc/"):
                auc[(f"{key[0]}:{name[4:]}", key[1])].append(value)
        for a in attacks[c.cell_id]:
            if a.status == "ok":
                mia[(*key, a.attack)].append(a.metrics["auc"])
    print("| dataset | " + " | ".join(f"{m} (paper) | {m} (ours)" for m in METHODS) + " |")
    print("|---" * (1 + 2 * len(METHODS)) + "|")
    rows = [(ds, ds, paper) for ds, paper in PAPER.items()]
    rows += [
        (f"{mix}{kind}: {member}", f"{mix}{kind}:{member}", paper)
        for (mix, member), paper in ACROSS.items()
        for kind in ("", DISJOINT)
    ]
    for name, key, paper in rows:
        if not any(auc.get((key, m)) for m in METHODS):
            continue
        cols = [
            f"{p:.2f} | {fmt(auc[(key, m)], 1.0, 3)}" for m, p in zip(METHODS, paper, strict=True)
        ]
        print(f"| {name} | " + " | ".join(cols) + " |")
    if any(m == CENTRALISED for _, m in auc):
        print("\n| dataset or column: member | centralised GIN | FedAvg | FedAvg − centralised |")
        print("|---|---|---|---:|")
        for name, key, _ in rows:
            central, fedavg = auc.get((key, CENTRALISED)), auc.get((key, "FedAvg"))
            if central and fedavg:
                gap = sum(fedavg) / len(fedavg) - sum(central) / len(central)
                print(f"| {name} | {fmt(central, 1.0, 3)} | {fmt(fedavg, 1.0, 3)} | {gap:+.3f} |")
    if any(m == GCFL for _, m in auc):
        print(
            "\n| dataset or column: member | FedAvg (paper) | FedAvg, all shared (ours) "
            f"| {GCFL} (ours) | GCFL's − all shared |"
        )
        print("|---|---|---|---|---:|")
        for name, key, paper in rows:
            every, gcfl = auc.get((key, "FedAvg")), auc.get((key, GCFL))
            if gcfl:
                gap = f"{sum(gcfl) / len(gcfl) - sum(every) / len(every):+.3f}" if every else "–"
                ours = fmt(every, 1.0, 3) if every else "–"
                print(f"| {name} | {paper[2]:.2f} | {ours} | {fmt(gcfl, 1.0, 3)} | {gap} |")
    others = (*METHODS, CENTRALISED, GCFL)
    variants = sorted({(k, m) for k, m in auc if m not in others and ":" in k})
    if variants:  # mixture members under a method variant (FedAvg releasing its last round)
        print("\n| column: member | method | seeds | AUC |")
        print("|---|---|---:|---|")
        for k, m in variants:
            values = auc[(k, m)]
            print(f"| {k.replace(':', ': ')} | {m} | {len(values)} | {fmt(values, 1.0, 3)} |")
    budgets = sorted(
        {m for k, m in auc if m.startswith("CeFGC") and m not in METHODS and k in PAPER}
    )
    if budgets:
        print(
            "\n| dataset | method | seeds | AUC | MIA on the GIN | MIA on generators (DSM loss) |"
        )
        print("|---|---|---:|---|---|---|")
        for ds in [d for d in PAPER if any(auc.get((d, b)) for b in budgets)]:
            for m in ("CeFGC", "CeFGC*", *budgets):  # the Table 2 budget first
                if auc.get((ds, m)):
                    gin = fmt(mia[(ds, m, "mia-threshold")], 1.0, 3)
                    gen = fmt(mia[(ds, m, "mia-generator-loss")], 1.0, 3)
                    n = len(auc[(ds, m)])
                    print(f"| {ds} | {m} | {n} | {fmt(auc[(ds, m)], 1.0, 3)} | {gin} | {gen} |")
    print("\n| dataset | method | MIA on the GIN (loss threshold) | MIA on generators (DSM loss) |")
    print("|---|---|---|---|")
    for ds in PAPER:
        for m in METHODS:
            if auc.get((ds, m)):
                gin = fmt(mia[(ds, m, "mia-threshold")], 1.0, 3)
                gen = fmt(mia[(ds, m, "mia-generator-loss")], 1.0, 3)
                print(f"| {ds} | {m} | {gin} | {gen} |")


if __name__ == "__main__":
    main()
