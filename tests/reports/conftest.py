import os

import pytest

from fgl_workbench.reports import build_report
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite

DP_SUITE = {
    "name": "dp",
    "reproducible": True,
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "louvain", "num_clients": 3}],
    "targets": [
        {"name": "fedavg", "params": {"rounds": 3}},
        {
            "name": "fedavg",
            "params": {"rounds": 3},
            "defenses": [{"name": "dp-fedavg", "params": {"noise_multiplier": 1.0}}],
        },
    ],
    "attacks": [{"name": "mia-threshold"}],
}


@pytest.fixture(scope="session")
def dp_report(tmp_path_factory):
    """The report of a small suite with an undefended and a DP-FedAvg target."""
    out = tmp_path_factory.mktemp("dp-report")
    run_suite(parse_suite(DP_SUITE), out, quiet=True)
    return build_report(out)


HOSTILE = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


@pytest.fixture(scope="session")
def hostile_text() -> str:
    """Markup as a results folder could hold it in any label: it must be drawn as text."""
    return HOSTILE


@pytest.fixture
def every_block_report():
    """A report with one block of each type, every text carrying markup that must be drawn as
    text, and a table long enough to run over pages."""
    import matplotlib.pyplot as plt

    from fgl_workbench.reports.content import (
        Callout,
        Figure,
        Paragraph,
        Preformatted,
        Report,
        Section,
        Table,
    )

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([0, 1], [0, 1], label=HOSTILE)
    ax.legend()
    rows = [[f"cell {i} {HOSTILE}", f"{i / 7:.3f}"] for i in range(120)]
    report = Report(
        f"title {HOSTILE}",
        [
            Section(
                f"first {HOSTILE}",
                [
                    Paragraph(f"paragraph {HOSTILE}"),
                    Callout(f"verdict ok {HOSTILE}", "ok"),
                    Callout("verdict warn", "warn"),
                    Callout("verdict info", "info"),
                    Figure(fig, f"alt {HOSTILE}"),
                ],
            ),
            Section(
                "long table",
                [Table([f"name {HOSTILE}", "value"], rows, 1, note=f"note {HOSTILE}")],
            ),
            Section("folded", [Preformatted(f"suite:\n  name: {HOSTILE}")], folded=True),
        ],
    )
    yield report
    plt.close(fig)


@pytest.fixture(scope="session")
def drawn():
    """Checks that a PNG (a screenshot or a PDF page) is drawn: of the expected size when
    given, and not blank (more than ``ink`` of its pixels off white); returns the share of
    its pixels off white."""
    from PIL import Image

    def check(png, size=None, ink=0.03) -> float:
        pixels = Image.open(png).convert("L")
        if size is not None:
            assert pixels.size == size
        histogram = pixels.histogram()
        assert histogram[255] < (1 - ink) * sum(histogram), f"{png} is blank"
        return 1 - histogram[255] / sum(histogram)

    return check


@pytest.fixture(scope="session")
def needs_weasyprint() -> None:
    """Skips where WeasyPrint cannot load (no Pango: the report is then HTML alone); .ci/run
    installs what it needs, so in CI that fails instead."""
    from fgl_workbench.reports.pdf import PdfUnavailable, load_weasyprint

    try:
        load_weasyprint()
    except PdfUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
