"""Draws a ``Report`` as one self-contained HTML file: figures embedded as PNG, no external
resources, so the file can be mailed or archived as it is."""

from __future__ import annotations

import html

from reports.content import Figure, Paragraph, Preformatted, Report, Table
from reports.plots import encode_png

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1150px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:0.85em}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f3f3f3} td.l,th.l{text-align:left}
img{max-width:100%;height:auto;display:block;margin:1em 0}
nav a{margin-right:1em} pre{font-size:0.8em;background:#f6f6f6;padding:0.5em}
summary h2{display:inline;cursor:pointer}
"""


def render_html(report: Report) -> str:
    nav = " ".join(f'<a href="#s{i}">{_e(s.title)}</a>' for i, s in enumerate(report.sections))
    parts = [f"<h1>{_e(report.title)}</h1>", f"<nav>{nav}</nav>"]
    for i, section in enumerate(report.sections):
        heading = f'<h{section.level} id="s{i}">{_e(section.title)}</h{section.level}>'
        body = "".join(_block(b) for b in section.blocks)
        if section.folded:
            parts.append(f"<details><summary>{heading}</summary>{body}</details>")
        else:
            parts.append(heading + body)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(report.title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )


def _block(block: object) -> str:
    if isinstance(block, Paragraph):
        return f"<p>{_e(block.text)}</p>"
    if isinstance(block, Table):
        return _table(block)
    if isinstance(block, Figure):
        return f'<img alt="{_e(block.alt)}" src="data:image/png;base64,{encode_png(block.figure)}">'
    if isinstance(block, Preformatted):
        return f"<pre>{_e(block.text)}</pre>"
    raise TypeError(f"unknown report block {type(block).__name__}")


def _table(t: Table) -> str:
    def cls(i: int) -> str:
        return " class=l" if i < t.left_columns else ""

    head = "".join(f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(t.header))
    body = "".join(
        "<tr>" + "".join(f"<td{cls(i)}>{_e(v)}</td>" for i, v in enumerate(r)) + "</tr>"
        for r in t.rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _e(x: object) -> str:
    return html.escape(str(x))
