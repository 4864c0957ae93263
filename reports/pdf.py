"""Draws a ``Report`` as a PDF with matplotlib alone (no browser, no TeX): text and tables
flow over A4 landscape pages, each figure gets a page of its own in vector form."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import BinaryIO

import matplotlib.pyplot as plt
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure as MplFigure

from reports.content import Figure, Paragraph, Preformatted, Report, Table

PAGE = (11.69, 8.27)  # A4 landscape, inches
MARGIN = 0.55
FONT = 7.0  # table and preformatted text, points
LINE = 1.45  # line height in font sizes
CHAR = 0.52  # mean glyph width in font sizes (DejaVu Sans)


def render_pdf(report: Report, path: Path | BinaryIO) -> None:
    # TrueType fonts embedded: the PDF's text can be searched and copied
    with plt.rc_context({"pdf.fonttype": 42}), PdfPages(path) as pdf:
        pages = _Pages(pdf)
        pages.text(report.title, 16, bold=True)
        for section in report.sections:
            pages.text(section.title, 13 if section.level == 2 else 11, bold=True, keep=0.8)
            for block in section.blocks:
                if isinstance(block, Paragraph):
                    pages.text(block.text, 9)
                elif isinstance(block, Table):
                    pages.table(block)
                elif isinstance(block, Figure):
                    pages.figure(block.figure)
                elif isinstance(block, Preformatted):
                    lines = block.text.splitlines()
                    for start in range(0, len(lines), 60):  # about a page at this size
                        pages.text("\n".join(lines[start : start + 60]), FONT - 1, mono=True)
        pages.flush()
        info = pdf.infodict()
        info["Title"] = report.title
        info["Creator"] = "fgl-workbench"


class _Pages:
    """A cursor over the current text page: blocks go below one another, a new page starts
    when the next one does not fit."""

    def __init__(self, pdf: PdfPages) -> None:
        self.pdf = pdf
        self.page: MplFigure | None = None
        self.y = 0.0  # inches from the bottom

    def _room(self, height: float) -> None:
        if self.page is None or self.y - height < MARGIN:
            self.flush()
            self.page = plt.figure(figsize=PAGE)
            self.y = PAGE[1] - MARGIN

    def flush(self) -> None:
        if self.page is not None:
            self.pdf.savefig(self.page)
            plt.close(self.page)
            self.page = None

    def text(
        self, text: str, size: float, bold: bool = False, mono: bool = False, keep: float = 0.0
    ) -> None:
        """Wrapped text; ``keep`` inches of room are demanded beyond it (a heading is not
        left alone at the foot of a page)."""
        width = int((PAGE[0] - 2 * MARGIN) * 72 / (size * CHAR))
        lines = [w for line in text.splitlines() for w in (textwrap.wrap(line, width) or [""])]
        height = len(lines) * size * LINE / 72 + 0.08
        self._room(height + keep)
        assert self.page is not None
        self.page.text(
            MARGIN / PAGE[0],
            self.y / PAGE[1],
            "\n".join(lines),
            fontsize=size,
            fontweight="bold" if bold else "normal",
            family="monospace" if mono else "sans-serif",
            va="top",
            linespacing=LINE,
        )
        self.y -= height

    def table(self, table: Table) -> None:
        widths = _column_widths(table)
        rows = [[_wrap(v, w) for v, w in zip(r, widths, strict=True)] for r in table.rows]
        header = [_wrap(h, w) for h, w in zip(table.header, widths, strict=True)]
        line = FONT * LINE / 72
        start = 0
        while True:
            self._room(2 * line * (1 + header_lines(header)))
            room = self.y - MARGIN - line * (header_lines(header) + 0.5)
            chunk, used = [], 0.0
            for r in rows[start:]:
                h = line * (max(v.count("\n") for v in r) + 1.3)
                if chunk and used + h > room:
                    break
                chunk.append(r)
                used += h
            self._draw_table(header, chunk, widths, line, table.left_columns)
            start += len(chunk)
            if start >= len(rows):
                return
            self.flush()

    def _draw_table(
        self,
        header: list[str],
        rows: list[list[str]],
        widths: list[float],
        line: float,
        left_columns: int,
    ) -> None:
        heights = [line * (header_lines(header) + 0.3)]
        heights += [line * (max(v.count("\n") for v in r) + 1.3) for r in rows]
        total = sum(heights)
        assert self.page is not None
        usable = PAGE[0] - 2 * MARGIN
        scale = sum(widths)
        ax = self.page.add_axes(
            (MARGIN / PAGE[0], (self.y - total) / PAGE[1], usable / PAGE[0], total / PAGE[1])
        )
        ax.axis("off")
        cells = ax.table(cellText=rows or None, colLabels=header, loc="upper left")
        cells.auto_set_font_size(False)
        cells.set_fontsize(FONT)
        for (r, c), cell in cells.get_celld().items():
            cell.set_width(widths[c] / scale)
            cell.set_height(heights[r] / total)
            cell.set_linewidth(0.3)
            cell.set_text_props(ha="left" if c < left_columns else "right", va="center")
            cell.PAD = 0.8 / widths[c]  # about one character either side
            if r == 0:
                cell.set_facecolor("#eeeeee")
        self.y -= total + 0.15

    def figure(self, fig: MplFigure) -> None:
        """A page of its own, at the figure's size, in vector form."""
        self.flush()
        self.pdf.savefig(fig, bbox_inches="tight")


def header_lines(header: list[str]) -> int:
    return max(h.count("\n") for h in header) + 1


def _column_widths(table: Table) -> list[float]:
    """Characters per column: the longest entry, capped so that the table fits the page;
    the capped columns wrap."""
    budget = (PAGE[0] - 2 * MARGIN) * 72 / (FONT * CHAR) - 2 * len(table.header)
    natural = [
        max([len(table.header[i])] + [len(r[i]) for r in table.rows]) + 2
        for i in range(len(table.header))
    ]
    if sum(natural) <= budget:
        return [float(n) for n in natural]
    fair = budget / len(natural)
    small = sum(n for n in natural if n <= fair)
    large = [n for n in natural if n > fair]
    share = (budget - small) / len(large)
    return [float(n) if n <= fair else max(share, 8.0) for n in natural]


def _wrap(text: str, width: float) -> str:
    return "\n".join(textwrap.wrap(str(text), max(int(width) - 2, 4)) or [""])
