"""The PDF report: the HTML laid out by WeasyPrint, read back with poppler's tools (skipped
where they are absent; .ci/run installs them): one page size, no heading left at the foot of
a page, table headers repeated, every page drawn; and the HTML alone, with one line saying
why, where WeasyPrint cannot load."""

import importlib.abc
import importlib.machinery
import io
import logging
import re
import shutil
import subprocess
import sys

import pytest

from fgl_workbench.reports.pdf import PdfUnavailable, load_weasyprint, render_pdf

POPPLER = all(shutil.which(t) for t in ("pdfinfo", "pdftotext", "pdftoppm", "pdfimages"))
needs_poppler = pytest.mark.skipif(
    not POPPLER, reason="poppler's tools are not installed (Debian: apt-get install poppler-utils)"
)
needs_weasyprint = pytest.mark.usefixtures("needs_weasyprint")
A4_LANDSCAPE = ("841.89", "595.28")  # points
BODY = ["-x", "0", "-y", "0", "-W", "842", "-H", "555"]  # points: the page above its footer


def _pages(pdf) -> list[list[str]]:
    """Each page's non-empty lines, without the footer (the title and the page counter)."""
    text = subprocess.run(
        ["pdftotext", *BODY, str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    pages = text.split("\f")[:-1]  # each page ends in a form feed
    return [[ln.strip() for ln in page.splitlines() if ln.strip()] for page in pages]


def _boxes(pdf) -> list[tuple[str, str]]:
    info = subprocess.run(
        ["pdfinfo", "-f", "1", "-l", "1000", "-box", str(pdf)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.findall(r"Page +\d+ MediaBox: +[\d.]+ +[\d.]+ +([\d.]+) +([\d.]+)", info)


def _image_pages(pdf) -> list[int]:
    """The page of each image, in the document's order (their alpha masks left out)."""
    listing = subprocess.run(
        ["pdfimages", "-list", str(pdf)], capture_output=True, text=True, check=True
    ).stdout
    return [int(row.split()[0]) for row in listing.splitlines()[2:] if row.split()[2] == "image"]


@pytest.fixture
def every_block_pdf(every_block_report, tmp_path):
    pdf = tmp_path / "blocks.pdf"
    render_pdf(every_block_report, pdf)
    return pdf


@needs_poppler
@needs_weasyprint
def test_one_page_size_and_no_heading_at_the_foot_of_a_page(dp_report):
    pdf = dp_report.with_name("report.pdf")
    pages = _pages(pdf)
    assert len(pages) > 3
    assert _boxes(pdf) == [A4_LANDSCAPE] * len(pages)
    headings = re.findall(r'<h2 id="s\d+">([^<]+)</h2>', dp_report.read_text())
    for number, lines in enumerate(pages, 1):
        assert lines[-1] not in headings, f"page {number} ends on the heading {lines[-1]!r}"
    text = "\n".join(ln for page in pages for ln in page)
    for heading in headings:
        assert heading in text
    # the folded suite configuration printed in full
    assert "reproducible: true" in text and "noise_multiplier: 1.0" in text


@needs_poppler
@needs_weasyprint
def test_each_figure_is_on_the_page_where_its_introduction_ends(dp_report):
    import matplotlib.pyplot as plt

    from fgl_workbench.reports.content import Figure, Paragraph
    from fgl_workbench.reports.report import report_content

    report = report_content(dp_report.parent)
    for fig in report.figures():
        plt.close(fig)
    intros = []  # the text just before each figure: its heading, or a paragraph's last words
    for section in report.sections:
        before = section.title
        for block in section.blocks:
            if isinstance(block, Figure):
                intros.append(before)
            before = " ".join(block.text.split()[-5:]) if isinstance(block, Paragraph) else None
    pdf = dp_report.with_name("report.pdf")
    pages = [" ".join(page) for page in _pages(pdf)]
    figure_pages = _image_pages(pdf)
    assert len(figure_pages) == len(intros) == 5
    for page, intro in zip(figure_pages, intros, strict=True):
        assert intro is None or intro in pages[page - 1], (page, intro)


@needs_poppler
@needs_weasyprint
def test_every_pdf_page_renders_to_an_image(dp_report, tmp_path, drawn):
    pdf = dp_report.with_name("report.pdf")
    subprocess.run(["pdftoppm", "-r", "40", "-png", str(pdf), str(tmp_path / "page")], check=True)
    images = sorted(tmp_path.glob("page-*.png"))
    assert len(images) == len(_boxes(pdf)) > 3
    for png in images:
        drawn(png, (468, 331), ink=0.005)  # A4 landscape at 40 dpi


@needs_poppler
@needs_weasyprint
def test_long_tables_repeat_their_header_and_text_stays_text(every_block_pdf, hostile_text):
    pages = _pages(every_block_pdf)
    assert _boxes(every_block_pdf) == [A4_LANDSCAPE] * len(pages)
    with_rows = [p for p in pages if any(ln.startswith("cell ") for ln in p)]
    assert len(with_rows) > 1  # the 120 rows run over pages
    for page in with_rows:
        assert f"name {hostile_text}" in page  # the header again on each of them
    text = "\n".join(ln for page in pages for ln in page)
    assert f"title {hostile_text}" in text and f"verdict ok {hostile_text}" in text
    assert f"name: {hostile_text}" in text  # the folded section, open


@needs_weasyprint
def test_weasyprint_lays_out_every_rule_it_is_given(every_block_report, caplog):
    # an unsupported CSS rule or a refused resource is a warning of WeasyPrint's logger
    with caplog.at_level(logging.WARNING, logger="weasyprint"):
        out = io.BytesIO()
        render_pdf(every_block_report, out)
    assert out.getvalue().startswith(b"%PDF-")
    assert not caplog.records, [r.getMessage() for r in caplog.records]


@needs_weasyprint
def test_font_chatter_is_kept_out_of_the_log_but_errors_and_css_warnings_pass(
    every_block_report, caplog, monkeypatch
):
    import weasyprint

    def chatty(html, target):
        """Logs as fontTools and WeasyPrint's font modules do while fonts are subset."""
        logging.getLogger("fontTools.subset").warning("glyph 'uni03B5' not in font")
        logging.getLogger("fontTools.ttLib").error("cannot read the font file")
        wp = logging.getLogger("weasyprint")
        for level, path, text in [
            (logging.WARNING, "weasyprint/pdf/fonts.py", 'Unable to subset "DejaVu Sans"'),
            (logging.ERROR, "weasyprint/text/fonts.py", "font table broken"),
            (logging.WARNING, "weasyprint/css/__init__.py", "Ignored `gap: 1px`"),
        ]:
            wp.handle(wp.makeRecord("weasyprint", level, path, 1, text, (), None))
        target.write(b"%PDF-")

    monkeypatch.setattr(weasyprint.HTML, "write_pdf", chatty)
    caplog.set_level(logging.WARNING)
    render_pdf(every_block_report, io.BytesIO())
    assert [r.getMessage() for r in caplog.records] == [
        "cannot read the font file",
        "font table broken",
        "Ignored `gap: 1px`",
    ]
    logging.getLogger("fontTools.subset").warning("after the PDF")  # levels restored
    assert caplog.records[-1].getMessage() == "after the PDF"


class _NoPango(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports ``weasyprint`` as on a machine without Pango: WeasyPrint prints a banner, then
    cffi raises OSError."""

    def find_spec(self, name, path=None, target=None):
        if name == "weasyprint":
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        print("\n-----\n\nWeasyPrint could not import some external libraries.\n-----\n")
        raise OSError(
            "cannot load library 'libgobject-2.0-0': libgobject-2.0-0: cannot open shared "
            "object file: No such file or directory.  Additionally, ctypes.util.find_library() "
            "did not manage to locate a library called 'libgobject-2.0-0'"
        )


@pytest.fixture
def no_weasyprint(monkeypatch):
    for name in [m for m in sys.modules if m == "weasyprint" or m.startswith("weasyprint.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoPango(), *sys.meta_path])


def test_without_pango_the_report_is_html_alone_with_one_line(
    dp_report, tmp_path, capsys, no_weasyprint
):
    from fgl_workbench.interface.cli import main

    out = tmp_path / "copy"
    shutil.copytree(dp_report.parent, out)
    (out / "report.pdf").write_bytes(b"%PDF- an older report")
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()
    assert not (out / "report.pdf").exists()  # the stale one is gone too
    captured = capsys.readouterr()
    assert "WeasyPrint could not import" not in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith("report.pdf skipped: WeasyPrint cannot load (cannot load library")
    assert "install Pango" in line and "Additionally" not in line


def test_without_weasyprint_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "weasyprint", None)
    with pytest.raises(PdfUnavailable, match=r"WeasyPrint is not installed .*install Pango"):
        load_weasyprint()
