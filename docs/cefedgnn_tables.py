"""CE-FedGNN's reproduction tables from the results stores of examples/reproduction/
cefedgnn-table2.yaml, cefedgnn-sigma0.yaml and cefedgnn-interbank.yaml: mean ± standard
deviation over seeds, as markdown.

    .venv/bin/python docs/cefedgnn_tables.py runs/cefedgnn-table2 runs/cefedgnn-sigma0 \
        runs/cefedgnn-interbank
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
from tables import fmt, load

from fgl_workbench.accountants import metric_epsilon
from fgl_workbench.storage.store import AttackRow, CellRow


def variant(cell: CellRow) -> str:
    p = cell.config["target"]["params"]
    if p.get("federated") is False:
        return "SC (stand-alone clients)"
    if p.get("cross_edges") is False:
        return "FedAvg (edges between clients dropped)"
    if p.get("beta") == 1.0:
        return f"β = 1 (no gradient moving average), γ = {p.get('gamma', 0.5)}"
    if p.get("gamma") == 1.0:
        return "FedGNN-ST (γ = 1: stale embeddings)"
    return f"CE-FedGNN γ = {p.get('gamma', 0.5)}"


def sigma0(cell: CellRow) -> float:
    for d in cell.config["target"].get("defenses", []):
        if d["name"] == "metric-dp":
            return float(d["params"]["sigma0"])
    return 0.0


def vector_epsilon(cell: CellRow) -> float | None:
    """The metric-DP vector releases' own ε(ρ) (σ0, R′ and ρ as the run measured them, the
    cell's δ): the paper's figure. The ledger states ∞ against every party (the degrees go
    in the clear), so it is not stored; None without metric-DP."""
    if not cell.metric_epsilons:
        return None
    u, delta = cell.utility, cell.metric_epsilons[0]["delta"]
    return metric_epsilon(sigma0(cell), u["metric_rho"], int(u["max_releases"]), delta).epsilon


def table2(cells: list[CellRow]) -> None:
    groups: dict[tuple[str, str], list[CellRow]] = defaultdict(list)
    for c in cells:
        if sigma0(c) == 0.0:
            groups[(c.config["dataset"]["name"], variant(c))].append(c)
    print("| dataset | method | seeds | accuracy | macro-F1 | val accuracy | best round |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for ds in sorted({d for d, _ in groups}):
        rows = {v: cs for (d, v), cs in groups.items() if d == ds}
        for v in sorted(rows, key=lambda v: (not v.startswith("CE"), v)):
            u = [c.utility for c in rows[v]]
            print(
                f"| {ds} | {v} | {len(u)} | {fmt([x['accuracy'] for x in u])} | "
                f"{fmt([x['macro_f1'] for x in u])} | {fmt([x['val_accuracy'] for x in u])} | "
                f"{np.mean([x['best_round'] for x in u]):.0f} |"
            )


DEFAULTS = {"combine": "last", "method": "optimise"}  # feature-inversion's


def interbank(cells: list[CellRow]) -> None:
    """The edge task: illicit-class F1 (the score rounds are chosen by), and ε where noised."""
    groups: dict[str, list[CellRow]] = defaultdict(list)
    for c in cells:
        s = sigma0(c)
        groups[variant(c) + (f", metric-DP σ0 = {s:g}" if s else "")].append(c)
    print("| method | seeds | illicit F1 | accuracy | AUC | val F1 | R′ | ε(ρ) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for v in sorted(groups, key=lambda v: (not v.startswith("CE"), v)):
        u = [c.utility for c in groups[v]]
        eps = fmt([e for c in groups[v] if (e := vector_epsilon(c)) is not None], 1, 1)
        print(
            f"| {v} | {len(u)} | {fmt([x['f1_illicit'] for x in u])} | "
            f"{fmt([x['accuracy'] for x in u])} | {fmt([x['auc'] for x in u])} | "
            f"{fmt([x['val_f1_illicit'] for x in u])} | "
            f"{np.mean([x['max_releases'] for x in u]):.0f} | {eps} |"
        )


def metric(rows: list[AttackRow], name: str, key: str, **params: object) -> float | None:
    for a in rows:
        same = all(a.params.get(k, DEFAULTS.get(k)) == v for k, v in params.items())
        if a.attack == name and same and a.status == "ok":
            return a.metrics.get(key)
    return None


def column(cs: list[CellRow], attacks, name: str, key: str, scale=100.0, **params) -> str:
    values = [v for c in cs if (v := metric(attacks[c.cell_id], name, key, **params)) is not None]
    return fmt(values, scale, 1 if scale == 100.0 else 2)


def sigma_curve(cells: list[CellRow], attacks: dict[str, list[AttackRow]]) -> None:
    groups: dict[float, list[CellRow]] = defaultdict(list)
    for c in cells:
        if any(a.attack == "reidentification-audit" for a in attacks[c.cell_id]):
            groups[sigma0(c)].append(c)
    print(
        "| σ0 | seeds | accuracy | macro-F1 | ρ | ε(ρ) | R′ | inversion cos last / mean / NN "
        "(prior) | link AUC emb / features | label acc emb / features (prior) | audit ε̂ ≤ ε |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|")
    fi, li, at = "feature-inversion", "link-stealing", "attribute-inference"
    for s, cs in sorted(groups.items()):
        u = [c.utility for c in cs]
        rho = fmt([x["metric_rho"] for x in u if "metric_rho" in x], 1, 3)
        eps = fmt([e for c in cs if (e := vector_epsilon(c)) is not None], 1, 1)
        inversion = (
            " / ".join(
                [
                    column(cs, attacks, fi, "cosine", 1, combine="last", method="optimise"),
                    column(cs, attacks, fi, "cosine", 1, combine="mean"),
                    column(cs, attacks, fi, "cosine", 1, method="nearest-neighbour"),
                ]
            )
            + f" ({column(cs, attacks, fi, 'cosine_baseline', 1, combine='mean')})"
        )
        link = " / ".join(
            column(cs, attacks, li, "auc", signal=sig) for sig in ("embedding", "features")
        )
        label = (
            " / ".join(
                column(cs, attacks, at, "accuracy", signal=sig) for sig in ("embedding", "features")
            )
            + f" ({column(cs, attacks, at, 'accuracy_baseline', signal='features')})"
        )
        audit = [
            (m["epsilon_held_out"], m["epsilon_accountant"])
            for c in cs
            for a in attacks[c.cell_id]
            if a.attack == "reidentification-audit" and a.status == "ok"
            for m in [a.metrics]
        ]
        audit_text = (
            f"{fmt([a for a, _ in audit], 1, 2)} ≤ {fmt([b for _, b in audit], 1, 1)}"
            if audit
            else "–"
        )
        print(
            f"| {s:g} | {len(cs)} | {fmt([x['accuracy'] for x in u])} | "
            f"{fmt([x['macro_f1'] for x in u])} | {rho} | {eps} | "
            f"{np.mean([x['max_releases'] for x in u]):.0f} | {inversion} | {link} | {label} | "
            f"{audit_text} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="results folders")
    args = parser.parse_args()
    cells, attacks = load(args.runs)
    edges = [c for c in cells if c.config["dataset"]["name"] == "interbank"]
    nodes = [c for c in cells if c.config["dataset"]["name"] != "interbank"]
    print("### Table 2 pattern\n")
    table2(nodes)
    if edges:
        print("\n### Interbank transactions (edge task)\n")
        interbank(edges)
    print("\n### σ0 curve (Cora)\n")
    sigma_curve(cells, attacks)


if __name__ == "__main__":
    main()
