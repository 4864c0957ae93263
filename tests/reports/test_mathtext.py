"""Labels and attack parameters read from a results folder are drawn verbatim: a ``$`` in them
used to start mathtext, and ``$\\frac{$`` crashed every figure of the report."""

from __future__ import annotations

import io

import matplotlib.pyplot as plt
import numpy as np
import pytest

from fgl_workbench.reports.plots import (
    CommunicationCost,
    RocCurve,
    communication_figure,
    heatmap_figure,
    roc_figure,
)

MATH = r"mia(x=$\frac{$)"


def drawn(fig) -> None:
    try:
        fig.savefig(io.BytesIO(), format="png")
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "make",
    [
        lambda: roc_figure(
            [RocCurve(MATH, MATH, np.array([0.001, 1.0]), np.array([0.01, 1.0]), 1)]
        ),
        lambda: heatmap_figure([MATH], [MATH], {"AUC": np.array([[0.6]])}),
        lambda: communication_figure([CommunicationCost(MATH, 2, 1e6, 1e6, 4e6)]),
    ],
)
def test_a_dollar_in_a_stored_label_is_drawn_as_text(make):
    drawn(make())
