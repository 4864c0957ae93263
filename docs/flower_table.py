"""docs/defenses.md's side-by-side table of Flower's DP wrappers and the workbench's
DP-FedAvg: utility, the loss attack's AUC and TPR at 1 % FPR from the querier and from the
server, ε per adversary (ours) with Flower's own beside, and the canary audit's lower bound,
from a results folder of examples/defenses/cora-flower-dp.yaml.

    FGLWB_DATA=../shared/data .venv/bin/fgl-workbench run \
        examples/defenses/cora-flower-dp.yaml --out runs/cora-flower-dp
    .venv/bin/python docs/flower_table.py runs/cora-flower-dp
"""

from __future__ import annotations

import math
import sys

from fgl_workbench.interface import api

WRAPPERS = {
    ("flower", "server", "central"): "Flower DifferentialPrivacyServerSideFixedClipping",
    ("flower", "client", "central"): "Flower ...ClientSideFixedClipping + fixedclipping_mod",
    ("flower", "server", "local"): "Flower LocalDpMod",
    ("fedavg", "", "central"): "workbench DP-FedAvg, central",
    ("fedavg", "", "local"): "workbench DP-FedAvg, local",
    ("flower", "server", ""): "Flower FedAvg, no DP",
    ("fedavg", "", ""): "workbench FedAvg, no DP",
}


def _eps(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return "∞" if math.isinf(value) else f"{value:.3g}"


def _ci(row, name: str, digits: int = 3) -> str:
    value = row[f"metric.{name}"]
    low, high = row[f"metric.{name}_ci_low"], row[f"metric.{name}_ci_high"]
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def flower_epsilon(row) -> float | None:
    """Flower's accountant's ε (central wrappers) or LocalDpMod's stated per-upload ε."""
    for key in ("utility.flower_epsilon", "utility.flower_epsilon_per_upload"):
        value = row.get(key)
        if value is not None and not math.isnan(value):
            return value
    return None


def table(out: str) -> str:
    frame = api.results(out)
    privacy = api.privacy(out)
    lines = [
        "| mechanism | accuracy % | MIA AUC, querier | TPR@1 %, querier | MIA AUC, server "
        "| ε clients / querier | ε server | Flower's ε | audit ε lb of ceiling (claimed) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cell_id, rows in frame.groupby("cell_id", sort=False):
        first = rows.iloc[0]
        config = privacy[cell_id]
        dp = "dp-fedavg" in str(first["defenses"])
        mode = first["defense.dp-fedavg.mode"] if dp else ""
        mode = mode if isinstance(mode, str) else "central"  # the default, left unstored
        side = first["target.dp_clipping"] if first["target"] == "flower" else ""
        side = side if isinstance(side, str) else "server" if first["target"] == "flower" else ""
        name = WRAPPERS.get((first["target"], side, mode), config["label"])
        if str(first.get("target.report_metrics")) == "False":
            name += ", no client metrics"
        if dp:
            name += f", σ = {first['defense.dp-fedavg.noise_multiplier']:g}"
        eps = {(r["adversary"], r["unit"]): r["epsilon"] for r in config["epsilons"]}
        from_server = rows["attack_params"].astype(str).str.contains("server")
        querier, server = rows[~from_server], rows[from_server]
        audits = config["audits"]
        audit = (
            "; ".join(
                f"{a['lower_bound']:.2f} of ≤ {a['ceiling']:.2f} ({_eps(a['claimed'])}"
                f"{'' if a['holds'] else ', VIOLATED'})"
                for a in audits
            )
            if audits
            else "–"
        )
        lines.append(
            f"| {name} | {100 * first['utility.accuracy']:.1f} "
            f"| {_ci(querier.iloc[0], 'auc')} | {_ci(querier.iloc[0], 'tpr@0.01')} "
            f"| {_ci(server.iloc[0], 'auc')} "
            f"| {_eps(eps.get(('querier', 'client')))} | {_eps(eps.get(('server', 'client')))} "
            f"| {_eps(flower_epsilon(first))} | {audit} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1]))
