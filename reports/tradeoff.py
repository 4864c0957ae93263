"""Privacy–utility trade-offs: one point per configuration (mean over seeds) with its privacy
figure (the accountant's ε against a querier, named with the unit it protects; else metric-DP's
ε(ρ) against a querier; else the information bottleneck's KL in nats), its utility and every
attack's success; as a markdown table and a figure.

An undefended configuration has neither figure; it is drawn as a dashed reference line."""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from fgl_workbench.reports.colours import series_colours, series_of
from fgl_workbench.reports.intervals import certifies, lower_bound, metrics_by_row, with_interval
from fgl_workbench.reports.plots import literal
from fgl_workbench.reports.summary import _mean_std, attacks_across_seeds, configurations, format_pm
from fgl_workbench.storage.store import AttackRow, CellRow

METRICS = ("auc", "tpr@0.01", "epsilon_lb")
REFERENCE_DASHES = (":", (0, (5, 2, 1, 2)), (0, (1, 4)))
ATTACK_STYLES = ["o-", "s--", "^-.", "d:", "v-", "P--"]  # marker, then line style
PRIVACY = {
    "epsilon": "accountant ε against a querier (δ of the suite)",
    "metric": "metric-DP ε(ρ) against a querier at the k-NN percentile ρ",
    "kl": "IB KL term (nats per node)",
}
HEADS = {"epsilon": "ε against a querier", "metric": "ε(ρ) against a querier", "kl": "KL (nats)"}


@dataclass(frozen=True)
class TradeoffPoint:
    configuration: str
    series: str  # the configuration without its swept settings: one line per series
    # the querier's ε at the coarsest unit the ledger states, mean over seeds; None without
    # DP events or where it is ∞ (no place on a log axis: the ε table shows it)
    epsilon: float | None
    metric_epsilon: float | None  # the querier's metric-DP ε(ρ), the same way
    units: dict[str, str]  # axis ("epsilon", "metric") → the privacy unit its ε protects
    kl_nats: float | None  # information bottleneck only
    accuracy: tuple[float, float]  # of what is released (see released_accuracy)
    attacks: dict[str, dict[str, tuple[float, float]]]  # attack label → metric → mean, std
    seeds: dict[str, list[dict]] = field(default_factory=dict)  # attack → each seed's metrics


def tradeoff_points(cells: list[CellRow], attacks: list[AttackRow]) -> list[TradeoffPoint]:
    per_attack: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for row in attacks_across_seeds(cells, attacks):
        per_attack.setdefault(row.cell, {})[row.attack] = row.metrics
    per_seed: dict[str, dict[str, list[dict]]] = {}
    for (label, attack), rows in metrics_by_row(cells, attacks).items():
        per_seed.setdefault(label, {})[attack] = rows
    points = []
    for label, group in configurations(cells):
        eps = _finite_querier_rows(group, metric=False)
        metric = _finite_querier_rows(group, metric=True)
        pairs = (("epsilon", eps), ("metric", metric))
        units = {axis: rows[0]["unit"] for axis, rows in pairs if rows}
        kl = [c.utility.get("ib_kl_nats") for c in group]
        points.append(
            TradeoffPoint(
                label,
                label.split(" [", 1)[0],
                _mean_or_none([r["epsilon"] for r in eps]),
                _mean_or_none([r["epsilon"] for r in metric]),
                units,
                _mean_or_none(kl),
                _mean_std([released_accuracy(c) for c in group]),
                per_attack.get(label, {}),
                per_seed.get(label, {}),
            )
        )
    return points


def _finite_querier_rows(group: list[CellRow], metric: bool) -> list[dict]:
    """Each seed's querier row (``CellRow.querier_row``) where its ε is finite."""
    rows = [c.querier_row(metric) for c in group]
    return [r for r in rows if r is not None and np.isfinite(r["epsilon"])]


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


def _privacy_cell(p: TradeoffPoint, axis: str | None) -> str:
    """A configuration's privacy figure with the unit its ε protects: ``2.1 per client``."""
    x = _x(p, axis)
    if x is None:
        return "none"
    unit = p.units.get(axis or "")
    return f"{x:.3g}" if unit is None else f"{x:.3g} per {unit}"


def axis_label(points: list[TradeoffPoint], axis: str) -> str:
    """The x axis: whose figure, and per which units the configurations' ε protect."""
    units = sorted({p.units[axis] for p in points if axis in p.units})
    return PRIVACY[axis] + (f", per {' / '.join(units)}" if units else "")


def tradeoff_table(points: list[TradeoffPoint]) -> list[str]:
    """Markdown of ``tradeoff_rows``."""
    head, rows = tradeoff_rows(points)
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return lines + ["| " + " | ".join(cols) + " |" for cols in rows]


def tradeoff_rows(points: list[TradeoffPoint]) -> tuple[list[str], list[list[str]]]:
    """Configuration, privacy figure, accuracy (%), then each attack's metrics: AUC
    and TPR at 1 % FPR with their 95 % intervals, the empirical ε lower bound as
    ``intervals.lower_bound`` reads it ("none certified" is no measurement of 0)."""
    axis = privacy_axis(points)
    # attacks scored by AUC/TPR only: a reconstruction's metrics have their own tables
    names = sorted({a for p in points for a, m in p.attacks.items() if set(m) & set(METRICS)})
    head = ["configuration", HEADS.get(axis or "", "ε"), "accuracy %"]
    head += [f"{a} {m}" for a in names for m in METRICS]
    rows = []
    for p in sorted(points, key=lambda p: (p.series, -(_x(p, axis) or np.inf))):
        cols = [p.configuration, _privacy_cell(p, axis), format_pm(p.accuracy)]
        for a in names:
            seeds = p.seeds.get(a, [])
            cols += [
                with_interval(seeds, "auc"),
                with_interval(seeds, "tpr@0.01"),
                lower_bound(seeds),
            ]
        rows.append(cols)
    return head, rows


def strongest_attacks(points: list[TradeoffPoint]) -> tuple[list[str], list[list[str]]]:
    """Per configuration: its privacy figure, accuracy, and the strongest attack by AUC, by
    TPR at 1% FPR and by empirical ε lower bound (mean ± std over seeds, with the attack)."""
    axis = privacy_axis(points)
    header = [
        "configuration",
        HEADS.get(axis or "", "ε"),
        "accuracy %",
        "best AUC",
        "best TPR@1% FPR",
        "largest ε lb",
    ]
    rows = []
    for p in sorted(points, key=lambda p: (p.series, -(_x(p, axis) or np.inf))):
        row = [p.configuration, _privacy_cell(p, axis), format_pm(p.accuracy)]
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
    fig, grid = plt.subplots(2 * len(settings), 2, figsize=(12, 8.4 * len(settings)), squeeze=False)
    names = sorted({a for p in points for a in p.attacks})
    colours = series_colours([series_of(p.series) for p in points])
    styles = dict(zip(names, ATTACK_STYLES * (len(names) // len(ATTACK_STYLES) + 1), strict=False))
    for i, setting in enumerate(settings):
        axes = grid[2 * i : 2 * i + 2].ravel()
        mine = [p for p in points if _setting(p) == setting]
        _tradeoff_row(axes, mine, axis, names, colours, styles, axis_label(points, axis))
        if len(settings) > 1:
            axes[0].set_ylabel(f"{literal(setting)}\ntest accuracy")
    _legends(fig, sorted({p.series for p in points}), colours, styles)
    fig.tight_layout()
    return fig


def _legends(
    fig: Figure,
    series: list[str],
    colours: dict[str, tuple[float, float, float]],
    styles: dict[str, str],
) -> None:
    """Two legends under the panels: a colour per configuration series, a line style per
    attack (instead of one entry per series × attack, which grows past reading)."""
    targets = [
        Line2D([], [], color=colours[series_of(s)], linewidth=3, label=literal(s)) for s in series
    ]
    targets.append(Line2D([], [], color="grey", linestyle=":", label="undefended (reference line)"))
    attacks = [
        Line2D([], [], color="black", linestyle=style[1:], marker=style[0], label=literal(name))
        for name, style in styles.items()
    ]
    attacks.append(Line2D([], [], color="black", linestyle="--", label="lb = accountant ε"))
    for handles, anchor in ((targets, 0.25), (attacks, 0.75)):
        fig.legend(
            handles=handles,
            loc="upper center",
            bbox_to_anchor=(anchor, 0.0),
            ncol=1,
            fontsize=9,
            frameon=False,
        )


def _setting(p: TradeoffPoint) -> str:
    """Dataset and partition of a configuration: ``Cora/louvain-10``."""
    return "/".join(p.series.split("/")[:2])


def _tradeoff_row(
    axes: np.ndarray,
    points: list[TradeoffPoint],
    axis: str,
    names: list[str],
    colours: dict[str, tuple[float, float, float]],
    styles: dict[str, str],
    xlabel: str,
) -> None:
    panels = [
        ("accuracy", None),
        ("attack AUC", "auc"),
        ("attack TPR at 1% FPR", "tpr@0.01"),
        ("audit: empirical ε lower bound", "epsilon_lb"),
    ]
    series = sorted({p.series for p in points})
    ticks = sorted({x for p in points if (x := _x(p, axis)) is not None})
    for ax, (title, metric) in zip(axes, panels, strict=True):
        for s in series:
            colour = colours[series_of(s)]
            keyed = [(_x(p, axis), p) for p in points if p.series == s]
            dp = sorted([(x, p) for x, p in keyed if x is not None], key=lambda t: t[0])
            for name in [None] if metric is None else names:
                ys = [_y(p, metric, name) for _, p in keyed]
                if dp:
                    xs = [x for x, _ in dp]
                    ys = [_y(p, metric, name) for _, p in dp]
                    ax.plot(xs, ys, styles.get(name or "", "o-"), color=colour)
                elif not np.isnan(ys).all():  # undefended: a reference line per attack
                    dash = REFERENCE_DASHES[names.index(name) % 3] if name else ":"
                    ax.axhline(np.nanmean(ys), color=colour, linestyle=dash)
        ax.set(xscale="log", xlabel=xlabel, title=title)
        # a tick at each configuration's value: a log axis over one decade shows one tick
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(_thinned(ticks), [f"{t:.3g}" for t in _thinned(ticks)])
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
    if not any(certifies(rows) for p in points for rows in p.seeds.values()):
        _nothing_certified(axes[3])


def _nothing_certified(ax: Axes) -> None:
    """The audit-gap panel of a run where no attack certified any ε > 0 holds only zeros:
    it is replaced by saying so (a 0 there is no measurement)."""
    ax.clear()
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        "audit gap: no attack certified an ε > 0\n(none certified at this run's size)",
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=10,
    )


def _thinned(ticks: list[float], most: int = 8) -> list[float]:
    """At most ``most`` of the values, evenly spread and keeping both ends."""
    if len(ticks) <= most:
        return ticks
    keep = np.unique(np.linspace(0, len(ticks) - 1, most).round().astype(int))
    return [ticks[i] for i in keep]


def _y(p: TradeoffPoint, metric: str | None, attack: str | None) -> float:
    if metric is None:
        return p.accuracy[0]
    got = p.attacks.get(attack or "", {}).get(metric)
    return float("nan") if got is None else got[0]
