"""Privacy–utility trade-offs: one point per configuration (mean over seeds) with its privacy
figure (the accountant's ε, or the information bottleneck's KL in nats where there is no ε),
its utility and every attack's success; as a markdown table and a figure.

An undefended configuration has neither figure; it is drawn as a dashed reference line."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from reports.colours import series_colours, series_of
from reports.plots import legend_below
from reports.summary import _mean_std, attacks_across_seeds, configurations, format_pm
from workbench.store import AttackRow, CellRow

METRICS = ("auc", "tpr@0.01", "epsilon_lb")
REFERENCE_DASHES = (":", (0, (5, 2, 1, 2)), (0, (1, 4)))
PRIVACY = {
    "epsilon": "accountant ε against a querier (δ of the suite)",
    "metric": "metric-DP ε(ρ) at the k-NN percentile ρ",
    "kl": "IB KL term (nats per node)",
}


@dataclass(frozen=True)
class TradeoffPoint:
    configuration: str
    series: str  # the configuration without its swept settings: one line per series
    epsilon: float | None  # mean over seeds; None without DP events
    metric_epsilon: float | None  # metric-DP's ε(ρ)
    kl_nats: float | None  # information bottleneck only
    accuracy: tuple[float, float]  # of what is released (see released_accuracy)
    attacks: dict[str, dict[str, tuple[float, float]]]  # attack label → metric → mean, std


def tradeoff_points(cells: list[CellRow], attacks: list[AttackRow]) -> list[TradeoffPoint]:
    per_attack: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for row in attacks_across_seeds(cells, attacks):
        per_attack.setdefault(row.cell, {})[row.attack] = row.metrics
    points = []
    for label, group in configurations(cells):
        # the querier's ε; an infinite one has no place on a log axis (the ε table shows it)
        eps = [c.epsilon for c in group if c.epsilon is not None and np.isfinite(c.epsilon)]
        metric = [c.utility.get("metric_epsilon") for c in group]
        kl = [c.utility.get("ib_kl_nats") for c in group]
        points.append(
            TradeoffPoint(
                label,
                label.split(" [", 1)[0],
                float(np.mean(eps)) if eps else None,
                _mean_or_none(metric),
                _mean_or_none(kl),
                _mean_std([released_accuracy(c) for c in group]),
                per_attack.get(label, {}),
            )
        )
    return points


def _mean_or_none(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def released_accuracy(c: CellRow) -> float:
    """Accuracy of what the target releases: its model's test accuracy, or for an embedding
    release (metric-DP) the accuracy of a linear probe trained on the released embeddings."""
    return c.utility.get("release_probe_accuracy", c.utility["accuracy"])


def privacy_axis(points: list[TradeoffPoint]) -> str | None:
    """The x axis: standard ε if any configuration has one, else metric ε(ρ), else IB KL."""
    for axis in ("epsilon", "metric", "kl"):
        if any(_x(p, axis) is not None for p in points):
            return axis
    return None


def _x(p: TradeoffPoint, axis: str | None) -> float | None:
    return {"epsilon": p.epsilon, "metric": p.metric_epsilon, "kl": p.kl_nats}.get(axis or "")


def tradeoff_table(points: list[TradeoffPoint]) -> list[str]:
    """Markdown: configuration, privacy figure, accuracy (%), then each attack's metrics."""
    axis = privacy_axis(points)
    # attacks scored by AUC/TPR only: a reconstruction's metrics have their own tables
    names = sorted({a for p in points for a, m in p.attacks.items() if set(m) & set(METRICS)})
    head = [
        "configuration",
        {"kl": "KL (nats)", "metric": "ε(ρ)"}.get(axis or "", "ε"),
        "accuracy %",
    ]
    head += [f"{a} {m}" for a in names for m in METRICS]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for p in sorted(points, key=lambda p: (p.series, -(_x(p, axis) or np.inf))):
        x = _x(p, axis)
        cols = [p.configuration, "none" if x is None else f"{x:.3g}", format_pm(p.accuracy)]
        for a in names:
            got = p.attacks.get(a, {})
            cols += [format_pm(got[m], 1.0, 3) if m in got else "n/a" for m in METRICS]
        lines.append("| " + " | ".join(cols) + " |")
    return lines


def strongest_attacks(points: list[TradeoffPoint]) -> tuple[list[str], list[list[str]]]:
    """Per configuration: its privacy figure, accuracy, and the strongest attack by AUC, by
    TPR at 1% FPR and by empirical ε lower bound (mean ± std over seeds, with the attack)."""
    axis = privacy_axis(points)
    header = [
        "configuration",
        {"kl": "KL (nats)", "metric": "ε(ρ)"}.get(axis or "", "ε"),
        "accuracy %",
        "best AUC",
        "best TPR@1% FPR",
        "largest ε lb",
    ]
    rows = []
    for p in sorted(points, key=lambda p: (p.series, -(_x(p, axis) or np.inf))):
        x = _x(p, axis)
        row = [p.configuration, "none" if x is None else f"{x:.3g}", format_pm(p.accuracy)]
        for metric in METRICS:
            got = [(m[metric], a) for a, m in p.attacks.items() if metric in m]
            if got:
                (mean, std), attack = max(got, key=lambda t: t[0][0])
                row.append(f"{format_pm((mean, std), 1.0, 3)} ({attack})")
            else:
                row.append("n/a")
        rows.append(row)
    return header, rows


def tradeoff_figure(points: list[TradeoffPoint]) -> Figure | None:
    """Accuracy, attack AUC, TPR at 1 % FPR and the audit gap (each attack's empirical ε lower
    bound, with the line lb = ε that a correct accountant's ε must stay above) against the
    privacy figure (log scale); one row of panels per dataset and partition, one colour per
    target with its defenses. None when no configuration has a privacy figure."""
    axis = privacy_axis(points)
    if axis is None:
        return None
    sns.set_theme(style="whitegrid", context="notebook")
    settings = sorted({_setting(p) for p in points})
    fig, grid = plt.subplots(len(settings), 4, figsize=(20, 4.2 * len(settings)), squeeze=False)
    names = sorted({a for p in points for a in p.attacks})
    colours = series_colours([series_of(p.series) for p in points])
    for setting, axes in zip(settings, grid, strict=True):
        mine = [p for p in points if _setting(p) == setting]
        _tradeoff_row(axes, mine, axis, names, colours)
        if len(settings) > 1:
            axes[0].set_ylabel(f"{setting}\ntest accuracy")
    legend_below(fig, 2)
    fig.tight_layout()
    return fig


def _setting(p: TradeoffPoint) -> str:
    """Dataset and partition of a configuration: ``Cora/louvain-10``."""
    return "/".join(p.series.split("/")[:2])


def _tradeoff_row(
    axes: np.ndarray,
    points: list[TradeoffPoint],
    axis: str,
    names: list[str],
    colours: dict[str, tuple[float, float, float]],
) -> None:
    panels = [
        ("accuracy", None),
        ("attack AUC", "auc"),
        ("attack TPR at 1% FPR", "tpr@0.01"),
        ("audit: empirical ε lower bound", "epsilon_lb"),
    ]
    styles = dict(zip(names, ["o-", "s--", "^-.", "d:", "v-", "P--"] * 4, strict=False))
    series = sorted({p.series for p in points})
    for ax, (title, metric) in zip(axes, panels, strict=True):
        for s in series:
            colour = colours[series_of(s)]
            keyed = [(_x(p, axis), p) for p in points if p.series == s]
            dp = sorted([(x, p) for x, p in keyed if x is not None], key=lambda t: t[0])
            for name in [None] if metric is None else names:
                label = s if metric is None else f"{s} · {name}"
                ys = [_y(p, metric, name) for _, p in keyed]
                if dp:
                    xs = [x for x, _ in dp]
                    ys = [_y(p, metric, name) for _, p in dp]
                    ax.plot(xs, ys, styles.get(name, "o-"), color=colour, label=label)
                elif not np.isnan(ys).all():  # undefended: a reference line per attack
                    dash = REFERENCE_DASHES[names.index(name) % 3] if name else ":"
                    ax.axhline(np.nanmean(ys), color=colour, linestyle=dash, label=label)
        ax.set(xscale="log", xlabel=PRIVACY[axis], title=title)
        ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on short ranges
    axes[0].set_ylabel("test accuracy")
    axes[1].axhline(0.5, color="k", linewidth=0.8)
    # fixed floors, so seed noise around chance does not fill the panel
    axes[1].set_ylim(0.45, max(0.75, axes[1].get_ylim()[1]))
    axes[2].set_ylim(0.0, max(0.05, axes[2].get_ylim()[1]))
    top = max(1.0, axes[3].get_ylim()[1])
    if axis == "epsilon":  # the accountant's ε bounds any attack's: lb must stay below lb = ε
        xs = np.geomspace(*axes[3].get_xlim(), 200)
        axes[3].plot(xs, xs, "k--", linewidth=0.8, label="lb = accountant ε")
        if xs[0] > top:
            note = f"the line lb = ε lies above this panel (ε ≥ {xs[0]:.2g})"
            axes[3].text(0.02, 0.97, note, transform=axes[3].transAxes, va="top", fontsize=8)
    axes[3].set_ylim(0.0, top)


def _y(p: TradeoffPoint, metric: str | None, attack: str | None) -> float:
    if metric is None:
        return p.accuracy[0]
    got = p.attacks.get(attack or "", {}).get(metric)
    return float("nan") if got is None else got[0]
