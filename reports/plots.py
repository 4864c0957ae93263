"""Figures for the report: ROC curves per attack, member and non-member score histograms, the
attack × configuration heatmap and the communication cost. Each returns a matplotlib figure;
the report embeds it as PNG."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from scipy.stats import rankdata  # noqa: E402

from fgl_workbench.attacks.metrics import CONFIDENCE, resampled_rocs  # noqa: E402
from fgl_workbench.reports.colours import series_colours, series_of, shade  # noqa: E402

FIGURE_DPI = 160  # the report's PNGs: sharp when printed at their size, a few hundred KB
FPR_FLOOR = 1e-4
FPR_GRID = np.geomspace(FPR_FLOOR, 1.0, 300)


@dataclass(frozen=True)
class RocCurve:
    """One configuration's ROC under one attack, averaged over its seeds (vertically, on a
    log-spaced FPR grid); ``ceiling`` is the (ε, δ) of a DP run whose ε bounds membership."""

    configuration: str
    attack: str
    fpr: np.ndarray
    tpr: np.ndarray
    seeds: int
    ceiling: tuple[float, float] | None = None
    resolution: float = FPR_FLOOR  # the smallest FPR the negatives resolve: 1 / their count
    band: tuple[np.ndarray, np.ndarray] | None = None  # 95 % pointwise (low, high) on ``fpr``

    def above_ceiling(self, line: bool = False) -> np.ndarray:
        """The FPRs (of the drawn part of the grid) where the whole band lies above the DP
        ceiling: only there does the curve contradict the run's (ε, δ). A line above its
        ceiling with the band reaching below it (one false positive among 300 non-members
        more or less) contradicts nothing. ``line``: where the line alone is above."""
        lower = self.tpr if line else None if self.band is None else self.band[0]
        if self.ceiling is None or lower is None:
            return np.empty(0)
        ceiling = dp_tpr_ceiling(self.fpr, *self.ceiling)
        return self.fpr[(lower > ceiling) & (self.fpr >= self.resolution)]


def resolution(curves: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The smallest non-zero FPR every seed's ROC resolves (1 / its negatives), so a mean curve
    is not drawn where some seed has no point: below it the curve is interpolation."""
    steps = [float(fpr[fpr > 0].min()) for fpr, _ in curves if (fpr > 0).any()]
    return max(steps, default=1.0)


def mean_roc(curves: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Vertical average of ROC curves on ``FPR_GRID`` (the low-FPR end is what matters)."""
    tprs = [np.interp(FPR_GRID, fpr, tpr) for fpr, tpr in curves]
    return FPR_GRID, np.mean(tprs, axis=0)


def roc_band(
    levels: list[tuple[np.ndarray, np.ndarray]], confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise band of ``mean_roc`` on ``FPR_GRID`` from each seed's members and
    non-members per score level (``fgl_workbench.attacks.metrics.roc_levels``): every seed's ROC is
    resampled (stratified bootstrap, thresholds re-chosen), read off the grid as ``mean_roc``
    reads it, averaged over the seeds replicate by replicate; the band is their quantiles."""
    replicates = np.mean([_grid_replicates(pos, neg) for pos, neg in levels], axis=0)
    low, high = np.quantile(replicates, [(1 - confidence) / 2, (1 + confidence) / 2], axis=0)
    return low, high


def _grid_replicates(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """[bootstrap replicates, grid]: one seed's resampled ROCs on ``FPR_GRID``."""
    return np.array(
        [
            np.interp(FPR_GRID, fpr, tpr)
            for block in resampled_rocs(pos, neg)
            for fpr, tpr in zip(block.fpr, block.tpr, strict=True)
        ]
    )


def fpr_span(fprs: np.ndarray) -> str:
    """FPRs as "0.0033" or their range "0.01–0.05"."""
    low, high = float(fprs.min()), float(fprs.max())
    return f"{low:.2g}" if np.isclose(low, high) else f"{low:.2g}–{high:.2g}"


def dp_tpr_ceiling(fpr: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """The highest TPR any membership test can reach at ``fpr`` against an (ε, δ)-DP mechanism
    (Kairouz, Oh and Viswanath 2015): TPR ≤ e^ε·FPR + δ and TPR ≤ 1 − e^−ε·(1 − δ − FPR)."""
    eps = min(epsilon, 50.0)  # beyond, the ceiling is 1 at every FPR on the grid
    first = np.exp(eps) * fpr + delta
    second = 1.0 - np.exp(-eps) * (1.0 - delta - fpr)
    return np.clip(np.minimum(first, second), 0.0, 1.0)


def literal(text: str) -> str:
    """``text`` as matplotlib shows it verbatim: a label or attack parameter read from a
    results folder may hold ``$``, which would start mathtext (``$\\frac{$`` crashes the
    figure); an escaped dollar is drawn as a plain one."""
    return text.replace("$", r"\$")


def roc_figure(curves: list[RocCurve]) -> Figure:
    """Log-log ROC, one panel per attack, one line per configuration in its series' colour
    with its 95 % band shaded; a DP configuration's ceiling is drawn dashed in the same
    colour, and crosses mark where the band lies wholly above it."""
    sns.set_theme(style="whitegrid", context="notebook")
    attacks = sorted({c.attack for c in curves})
    cols = min(3, len(attacks))
    rows = math.ceil(len(attacks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows), squeeze=False)
    colours = _configuration_colours([c.configuration for c in curves])
    for ax, attack in zip(axes.flat, attacks, strict=False):
        for c in (c for c in curves if c.attack == attack):
            colour = colours[c.configuration]
            resolved = c.fpr >= c.resolution
            fpr = np.clip(c.fpr[resolved], FPR_FLOOR, 1)
            ax.plot(
                fpr,
                np.clip(c.tpr[resolved], FPR_FLOOR, 1),
                color=colour,
                linewidth=1.4,
                label=literal(c.configuration),
            )
            if c.band is not None:
                low, high = (np.clip(b[resolved], FPR_FLOOR, 1) for b in c.band)
                ax.fill_between(
                    fpr, low, high, color=colour, alpha=0.18, linewidth=0, label="95 % band"
                )
            crossed = c.above_ceiling()
            if crossed.size:
                ax.plot(
                    crossed,
                    np.clip(np.interp(crossed, c.fpr, c.tpr), FPR_FLOOR, 1),
                    "x",
                    color="crimson",
                    markersize=4,
                    label="95 % band wholly above the DP ceiling",
                )
            if c.ceiling is not None:
                eps, delta = c.ceiling
                ax.plot(
                    FPR_GRID,
                    np.clip(dp_tpr_ceiling(FPR_GRID, eps, delta), FPR_FLOOR, 1),
                    color=colour,
                    linestyle="--",
                    linewidth=1.0,
                    label=f"DP ceiling, ε = {eps:.2g}",
                )
        ax.plot([FPR_FLOOR, 1], [FPR_FLOOR, 1], "k:", linewidth=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlim=(FPR_FLOOR, 1),
            ylim=(FPR_FLOOR, 1.05),
            xlabel="false positive rate",
            ylabel="true positive rate",
            title=literal(attack),
        )
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(attacks) :]:
        ax.set_visible(False)
    legend_below(fig, 1 if len(attacks) == 1 else 2, fontsize=9)
    fig.tight_layout()
    return fig


def score_histogram_figure(
    panels: list[tuple[str, np.ndarray, np.ndarray]],
    classes: tuple[str, str] = ("members", "non-members"),
) -> Figure:
    """Member and non-member scores (``classes`` names them), one panel per (title, scores,
    is_member), each on its own bins and each class as a share of itself (the classes may
    differ in size): where they overlap, no threshold tells them apart."""
    sns.set_theme(style="whitegrid", context="notebook")
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False)
    for ax, (title, scores, is_member) in zip(axes.flat, panels, strict=False):
        shown, xlabel = drawable_scores(scores)
        bins = np.linspace(shown.min(), shown.max(), min(60, max(10, shown.size // 20)) + 1)
        for label, pick, colour in (
            (classes[0], is_member, "crimson"),
            (classes[1], ~is_member, "steelblue"),
        ):
            share = np.full(int(pick.sum()), 1.0 / max(int(pick.sum()), 1))
            ax.hist(shown[pick], bins=bins, weights=share, alpha=0.5, color=colour, label=label)
        ax.set(xlabel=xlabel, ylabel="share of the class", title=literal(title))
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    legend_below(fig, 2, fontsize=9)
    fig.tight_layout()
    return fig


def drawable_scores(scores: np.ndarray) -> tuple[np.ndarray, str]:
    """Scores a histogram can bin: as they are where they are finite and their range is a
    finite, non-zero float; else their ranks (a plug-in may answer ±1.7e308, NaN or ∞, and
    a row's figure must not stop the report), with the axis saying so."""
    s = np.asarray(scores, dtype=float)
    if np.isfinite(s).all() and s.size:
        span = float(s.max()) - float(s.min())
        if span == 0:
            return s, "attack score (all equal)"
        if np.isfinite(span) and np.unique(np.linspace(s.min(), s.max(), 11)).size == 11:
            return s, "attack score"  # the float grid can split the range
    ranks = rankdata(np.nan_to_num(s, nan=-np.inf))  # ties share their mean rank
    return (ranks - 1) / max(s.size - 1, 1), "attack score's rank (its values cannot be binned)"


def heatmap_figure(
    configurations: list[str], attacks: list[str], values: dict[str, np.ndarray]
) -> Figure:
    """Attack (columns) × configuration (rows) matrices, one panel per metric (stacked),
    annotated with the mean over seeds; grey where the attack does not apply or the metric is
    not resolved."""
    sns.set_theme(style="white", context="notebook")
    width = max(5.0, 1.1 * len(attacks) + 2.0)
    height = max(2.0, 0.42 * len(configurations) + 0.8)
    fig, axes = plt.subplots(
        len(values), 1, figsize=(width + 4.0, height * len(values) + 2.2), squeeze=False
    )
    for i, (ax, (title, matrix)) in enumerate(zip(axes[:, 0], values.items(), strict=True)):
        # a fixed scale: a chance-level TPR of 0.04 must not look like a strong attack
        low, high = (0.5, 1.0) if title.startswith("AUC") else (0.0, 1.0)
        sns.heatmap(
            matrix,
            ax=ax,
            annot=True,
            fmt=".2f",
            cmap="rocket_r",
            vmin=low,
            vmax=high,
            mask=np.isnan(matrix),
            # the panels share them
            xticklabels=[literal(a) for a in attacks] if i == len(values) - 1 else False,
            yticklabels=[literal(c) for c in configurations],
            annot_kws={"fontsize": 8},
            cbar_kws={"shrink": 0.8},
        )
        ax.set_facecolor("#dddddd")
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelrotation=35, labelsize=8)
        ax.tick_params(axis="y", labelsize=8)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class CommunicationCost:
    configuration: str
    rounds: float
    up_per_round: float  # bytes, mean over seeds
    down_per_round: float
    total: float


def communication_figure(costs: list[CommunicationCost]) -> Figure:
    """Bytes per round (uplink and downlink) and in total, per configuration, log scale."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, 2, figsize=(12, max(2.5, 0.42 * len(costs) + 1.4)), sharey=True)
    colours = _configuration_colours([c.configuration for c in costs])
    y = np.arange(len(costs))
    names = [c.configuration for c in costs]
    up = np.array([c.up_per_round for c in costs]) / 1e6
    down = np.array([c.down_per_round for c in costs]) / 1e6
    bar = [colours[n] for n in names]
    axes[0].barh(y - 0.2, up, height=0.4, color=bar, label="uplink")
    axes[0].barh(y + 0.2, down, height=0.4, color=bar, alpha=0.45, label="downlink")
    axes[0].set(xscale="log", xlabel="MB per round (solid: up, light: down)")
    axes[1].barh(y, [c.total / 1e6 for c in costs], color=bar)
    axes[1].set(xscale="log", xlabel="MB in total (up + down)")
    axes[0].set_yticks(y, [literal(n) for n in names], fontsize=8)
    axes[0].invert_yaxis()
    fig.tight_layout()
    return fig


def _configuration_colours(configurations: list[str]) -> dict[str, tuple[float, float, float]]:
    """Each configuration in its series' colour, shaded when a series has several."""
    base = series_colours([series_of(c) for c in configurations])
    out = {}
    for s, colour in base.items():
        mine = sorted({c for c in configurations if series_of(c) == s})
        out.update({c: shade(colour, i, len(mine)) for i, c in enumerate(mine)})
    return out


def legend_below(fig: Figure, columns: int, fontsize: float = 9) -> None:
    """One legend under all panels, each label once: panels share their configurations."""
    handles, labels = [], []
    for a in fig.axes:
        for h, lab in zip(*a.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=columns,
        fontsize=fontsize,
        frameon=False,
    )


def encode_png(fig: Figure) -> str:
    """The figure as base64 PNG, so the HTML stays one self-contained file."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()
