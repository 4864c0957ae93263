"""One colour per series (target with its defenses) in every figure of a report, so a target
is recognised at a glance; the configurations of a sweep within a series are shades of it."""

from __future__ import annotations

import seaborn as sns
from matplotlib.colors import to_rgb

Colour = tuple[float, float, float]


def series_colours(series: list[str]) -> dict[str, Colour]:
    """Colour-blind-safe palette over the series in sorted order: the same names get the same
    colours in every figure of a report."""
    names = sorted(set(series))
    palette = sns.color_palette("colorblind", max(len(names), 1))
    return {name: to_rgb(palette[i % len(palette)]) for i, name in enumerate(names)}


def shade(colour: Colour, index: int, count: int) -> Colour:
    """The ``index``-th of ``count`` shades of ``colour``, from light to the full colour."""
    if count <= 1:
        return colour
    mix = 0.45 * (1 - index / (count - 1))  # up to 45 % white
    r, g, b = colour
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def series_of(configuration: str) -> str:
    """The series of a configuration label: its target with defenses (the label's third part),
    without the swept settings, e.g. ``Cora/louvain-10/fedavg+dp-fedavg [..]`` →
    ``fedavg+dp-fedavg``."""
    base = configuration.split(" [", 1)[0]
    parts = base.split("/")
    return parts[2] if len(parts) >= 3 else base
