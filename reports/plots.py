"""Figures for the report, returned as base64 PNG so the HTML stays one self-contained file."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402


def roc_figure(curves: list[tuple[str, np.ndarray, np.ndarray]]) -> str:
    """Log-log ROC: the low-FPR region is where membership inference matters."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(6, max(5.0, 0.16 * len(curves))))
    floor = 1e-4
    for label, fpr, tpr in curves:
        ax.plot(np.clip(fpr, floor, 1), np.clip(tpr, floor, 1), label=label, linewidth=1.4)
    ax.plot([floor, 1], [floor, 1], "k--", linewidth=0.8, label="chance")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="False positive rate",
        ylabel="True positive rate",
        xlim=(floor, 1),
        ylim=(floor, 1.05),
        title="Membership inference ROC",
    )
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside: any count
    return _encode(fig)


def _encode(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()
