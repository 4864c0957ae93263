"""Draws a ``Report`` as a PDF: its HTML (``fgl_workbench.reports.html``) laid out by WeasyPrint
under the print rules of the report's stylesheet: A4 landscape pages, each heading kept with what
follows it, figures and table rows never split, table headers repeated, folded sections printed
open. One source for both files, so the PDF cannot say something the HTML does not.

WeasyPrint needs the system's Pango; where it cannot load, ``PdfUnavailable`` says so and
``build_report`` writes the HTML alone. While a page is laid out, the font chatter of
fontTools and of WeasyPrint's font modules (loading, subsetting) is kept out of the log: a
reader can do nothing about it. Errors, and every other warning (a CSS rule WeasyPrint cannot
lay out, a character no font draws), still pass."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

from fgl_workbench.reports.content import Report

INSTALL_HINT = (
    "install Pango (Debian/Ubuntu: apt-get install libpango-1.0-0 libpangoft2-1.0-0; "
    "macOS: brew install pango) and `pip install weasyprint`, then rerun "
    "`fgl-workbench report DIR`"
)


class PdfUnavailable(RuntimeError):
    """WeasyPrint, or the system libraries it loads, are missing."""


def render_pdf(report: Report, path: Path | BinaryIO) -> None:
    from fgl_workbench.reports.html import render_html

    write_pdf(render_html(report), path)


def write_pdf(page: str, path: Path | BinaryIO) -> None:
    """Lays out ``page``, a self-contained report page, as a PDF; nothing outside the page
    is fetched (only ``data:`` URIs are followed)."""
    weasyprint = load_weasyprint()
    fetcher = weasyprint.urls.URLFetcher(allowed_protocols={"data"})
    with font_chatter_silenced():
        weasyprint.HTML(string=page, url_fetcher=fetcher).write_pdf(path)


@contextlib.contextmanager
def font_chatter_silenced() -> Iterator[None]:
    """fontTools' loggers below ERROR, and WeasyPrint's records from its font modules
    (``text/fonts.py``, ``pdf/fonts.py``) below ERROR, dropped until the block ends."""
    fonttools = logging.getLogger("fontTools")
    weasyprint = logging.getLogger("weasyprint")
    level = fonttools.level
    fonttools.setLevel(logging.ERROR)
    weasyprint.addFilter(_not_font_chatter)
    try:
        yield
    finally:
        weasyprint.removeFilter(_not_font_chatter)
        fonttools.setLevel(level)


def _not_font_chatter(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR or record.module != "fonts"


def load_weasyprint() -> ModuleType:
    """The ``weasyprint`` module, or ``PdfUnavailable`` saying what is missing."""
    try:
        # where a library is missing, WeasyPrint prints a banner of its own before raising
        with contextlib.redirect_stdout(io.StringIO()):
            import weasyprint
            import weasyprint.urls
    except ImportError as exc:
        raise PdfUnavailable(f"WeasyPrint is not installed ({exc}); {INSTALL_HINT}") from None
    except OSError as exc:
        # cffi's message goes on with ".  Additionally, ctypes.util.find_library() did not..."
        reason = str(exc).split("Additionally")[0].rstrip(" .") or type(exc).__name__
        raise PdfUnavailable(f"WeasyPrint cannot load ({reason}); {INSTALL_HINT}") from None
    return weasyprint
