"""Draws a ``Report`` as one self-contained HTML file from the Jinja2 templates in
``reports/templates``: CSS inline, figures embedded as PNG data URIs, no script and no
external resource, so the file can be mailed or archived as it is. Autoescaping is on:
everything a report says comes from a results folder and is drawn as text, never as markup."""

from __future__ import annotations

import base64
import struct
from functools import cache

import jinja2
from matplotlib.figure import Figure as MplFigure

from fgl_workbench.reports.content import (
    Block,
    Callout,
    Figure,
    Paragraph,
    Preformatted,
    Report,
    Table,
)
from fgl_workbench.reports.plots import FIGURE_DPI, encode_png

# each block type → its macro in templates/blocks.html.j2; a new block type needs both
BLOCK_MACROS: dict[type, str] = {
    Paragraph: "paragraph",
    Table: "table",
    Figure: "figure",
    Preformatted: "preformatted",
    Callout: "callout",
}
CSS_PX_PER_INCH = 96


def render_html(report: Report) -> str:
    return _environment().get_template("report.html.j2").render(report=report)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fgl_workbench.reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.globals.update(macro_of=macro_of, embed_png=embed_png)
    return env


def macro_of(block: Block) -> str:
    try:
        return BLOCK_MACROS[type(block)]
    except KeyError:
        raise TypeError(
            f"unknown report block {type(block).__name__}: add it to "
            "fgl_workbench.reports.html.BLOCK_MACROS with a macro in "
            "reports/templates/blocks.html.j2"
        ) from None


def embed_png(fig: MplFigure) -> dict[str, str | int]:
    """The figure as base64 PNG at ``FIGURE_DPI`` with its width in CSS pixels: shown at the
    size it was drawn for (its fonts at their point sizes), narrowed to fit the page."""
    data = encode_png(fig)
    (width_px,) = struct.unpack(">I", base64.b64decode(data[:32])[16:20])  # from the IHDR
    return {"data": data, "width": round(width_px * CSS_PX_PER_INCH / FIGURE_DPI)}
