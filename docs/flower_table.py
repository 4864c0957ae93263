"""docs/defenses.md's side-by-side table of Flower's DP wrappers and the workbench's
DP-FedAvg: utility, the loss attack's AUC and TPR at 1 % FPR from the querier and from the
server, ε per adversary (ours) with Flower's own beside, and the canary audit's lower bound,
from a results folder of examples/defenses/cora-flower-dp.yaml (or its SecAgg+ rows,
cora-flower-secaggplus.yaml).

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


def _over_seeds(rows, name: str, scale: float = 1.0, digits: int = 3) -> str:
    """Mean ± sd over the seeds, and the seeds' mean 95 % interval."""
    per_seed = rows.groupby("seed").first()
    value = scale * per_seed[f"metric.{name}"]
    low = scale * per_seed[f"metric.{name}_ci_low"].mean()
    high = scale * per_seed[f"metric.{name}_ci_high"].mean()
    spread = f" ± {value.std(ddof=1):.{digits}f}" if len(value) > 1 else ""
    return f"{value.mean():.{digits}f}{spread} [{low:.{digits}f}, {high:.{digits}f}]"


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
    for _, rows in frame.groupby("configuration", sort=False):
        first = rows.iloc[0]
        config = privacy[first["cell_id"]]
        dp = "dp-fedavg" in str(first["defenses"])
        mode = first["defense.dp-fedavg.mode"] if dp else ""
        mode = mode if isinstance(mode, str) else "central"  # the default, left unstored
        side = first["target.dp_clipping"] if first["target"] == "flower" else ""
        side = side if isinstance(side, str) else "server" if first["target"] == "flower" else ""
        name = WRAPPERS.get((first["target"], side, mode), config["label"])
        if first.get("target.secure_aggregation") == "secaggplus":
            name += " under SecAgg+"
        if str(first.get("target.report_metrics")) == "False":
            name += ", no client metrics"
        if dp:
            name += f", σ = {first['defense.dp-fedavg.noise_multiplier']:g}"
        eps = {(r["adversary"], r["unit"]): r["epsilon"] for r in config["epsilons"]}
        from_server = rows["attack_params"].astype(str).str.contains("server")
        querier, server = rows[~from_server], rows[from_server]
        accuracy = 100 * rows.groupby("seed")["utility.accuracy"].first()
        spread = f" ± {accuracy.std(ddof=1):.1f}" if len(accuracy) > 1 else ""
        lines.append(
            f"| {name} | {accuracy.mean():.1f}{spread} "
            f"| {_over_seeds(querier, 'auc')} | {_over_seeds(querier, 'tpr@0.01')} "
            f"| {_over_seeds(server, 'auc')} "
            f"| {_eps(eps.get(('querier', 'client')))} | {_eps(eps.get(('server', 'client')))} "
            f"| {_eps(flower_epsilon(first))} | {_audits(rows, privacy)} |"
        )
    return "\n".join(lines)


def _audits(rows, privacy) -> str:
    """Each trial's lower bounds over the seeds (lowest–highest) beside its ceiling and the
    claimed ε; VIOLATED where any seed's audit failed."""
    by_trial: dict[int, list] = {}
    for cell_id in rows["cell_id"].unique():
        for k, a in enumerate(privacy[cell_id]["audits"]):
            by_trial.setdefault(k, []).append(a)
    parts = []
    for audits in by_trial.values():
        bounds = [a["lower_bound"] for a in audits]
        held = all(a["holds"] for a in audits)
        span = f"{min(bounds):.2f}" if len(bounds) == 1 else f"{min(bounds):.2f}–{max(bounds):.2f}"
        parts.append(
            f"{span} of ≤ {max(a['ceiling'] for a in audits):.2f} "
            f"({_eps(audits[0]['claimed'])}{'' if held else ', VIOLATED'})"
        )
    return "; ".join(parts) if parts else "–"


if __name__ == "__main__":
    print(table(sys.argv[1]))
