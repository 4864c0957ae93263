import re
import shutil
import subprocess
import typing

import pytest

from fgl_workbench.errors import WorkbenchError
from fgl_workbench.reports import build_report
from fgl_workbench.reports.content import Block, Callout, Report, Section
from fgl_workbench.reports.html import BLOCK_MACROS, render_html
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    raw = {
        "name": "report <test>",
        "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
        "partitions": [{"method": "louvain", "num_clients": 3, "aux_fraction": 0.0}],
        "targets": [{"name": "fedavg", "params": {"rounds": 3}}],
        "attacks": [{"name": "mia-threshold"}, {"name": "mia-threshold", "params": {"hops": 2}}],
    }
    run_suite(parse_suite(raw), out, quiet=True)
    return out


def test_report_is_self_contained_and_shows_every_section(results):
    page = build_report(results).read_text()
    for heading in (
        "Setup",
        "Utility",
        "Communication",
        "Attacks",
        "ROC curves",
        "Score histograms",
        "Methods glossary",
        "Every attack result",
        "Suite configuration",
    ):
        assert re.search(rf'<h2 id="s\d+">{heading}</h2>', page), heading
    assert "report &lt;test&gt;" in page  # escaped
    # communication, attack heatmap, ROC curves, score histograms; no privacy-utility figure
    # without DP
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 4
    assert "Privacy–utility" not in page
    assert "http://" not in page and "https://" not in page
    assert page.count("csbm/louvain-3/fedavg/seed0") >= 3
    assert "no DP" in page
    assert "Likelihood-ratio" not in page  # the glossary lists only what the run used
    assert "Loss / confidence / entropy threshold attack" in page


@pytest.mark.usefixtures("needs_weasyprint")
def test_the_pdf_carries_the_same_sections(results):
    page = build_report(results).read_text()
    pdf = results / "report.pdf"
    assert pdf.read_bytes().startswith(b"%PDF-")
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (Debian: poppler-utils) is not installed")
    text = subprocess.run(
        ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    for heading in re.findall(r'<h2 id="s\d+">([^<]+)</h2>', page):
        assert heading in text, heading
    assert "csbm/louvain-3/fedavg/seed0" in text and "mia-threshold(hops=2)" in text


def test_a_dp_run_gets_ceilings_tradeoff_and_audit(dp_report):
    page = dp_report.read_text()
    assert "Privacy–utility and the audit gap" in page
    # communication, attack heatmap, ROC curves, score histograms, privacy–utility
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 5
    assert "Client-level DP-FedAvg" in page


def test_roc_ceilings_only_where_epsilon_bounds_membership(tmp_path):
    from fgl_workbench.reports.report import load_results, roc_curves

    raw = {
        "name": "units",
        "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
        "partitions": [{"method": "louvain", "num_clients": 3}],
        "targets": [
            {
                "name": "gap",
                "params": {"rounds": 2},
                "defenses": [{"name": "aggregation-perturbation", "params": {"level": "edge"}}],
            },
            {
                "name": "fedavg",
                "params": {"rounds": 2},
                "defenses": [{"name": "dp-fedavg", "params": {"noise_multiplier": 1.0}}],
            },
        ],
        "attacks": [{"name": "mia-threshold"}],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    found = load_results([tmp_path])
    curves = roc_curves(found.rocs, found.cells, found.attacks, 1e-5)
    ceilings = {c.configuration.split("/")[2]: c.ceiling for c in curves}
    assert ceilings["gap+aggregation-perturbation"] is None  # edge-level ε: no node bound
    eps = next(c.epsilon for c in found.cells if "dp-fedavg" in c.label)
    assert ceilings["fedavg+dp-fedavg"] == (eps, 1e-5)


def test_no_aux_pool_means_no_threshold(results):
    page = build_report(results).read_text()
    # balanced accuracy and TPR@0.1% are n/a
    assert len(re.findall(r"<td( class=\"n\")?>n/a</td>", page)) >= 2


def test_missing_store(tmp_path):
    with pytest.raises(WorkbenchError, match="no results store"):
        build_report(tmp_path)


def test_summary_across_seeds(tmp_path):
    from fgl_workbench.reports.summary import across_seeds
    from fgl_workbench.storage.store import ResultsStore

    raw = {
        "name": "seeds",
        "reproducible": True,
        "seeds": [0, 1, 2],
        "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
        "partitions": [{"method": "metis", "num_clients": 2}],
        "targets": [{"name": "fedavg", "params": {"rounds": 2}}],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    cells = ResultsStore(tmp_path).cells()
    (summary,) = across_seeds(cells)
    accs = [c.utility["accuracy"] for c in cells]
    assert summary.seeds == [0, 1, 2]
    assert summary.accuracy[0] == pytest.approx(sum(accs) / 3)
    assert summary.label == "csbm/metis-2/fedavg"
    page = build_report(tmp_path).read_text()
    assert "Across seeds" in page and ">seeds 0–2</td>" in page
    assert "csbm/metis-2/fedavg (seeds 0–2)." in page  # the verdict names them alike


def test_sweep_configurations_get_distinct_labels(tmp_path):
    from fgl_workbench.reports.summary import across_seeds
    from fgl_workbench.storage.store import ResultsStore

    raw = {
        "name": "sweep",
        "reproducible": True,
        "seeds": [0],
        "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
        "partitions": [{"method": "metis", "num_clients": 2}],
        "targets": [
            {"name": "fedavg", "params": {"rounds": 1, "lr": 0.01}},
            {"name": "fedavg", "params": {"rounds": 1, "lr": 0.1}},
        ],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    labels = [s.label for s in across_seeds(ResultsStore(tmp_path).cells())]
    assert labels == [
        "csbm/metis-2/fedavg [lr=0.01]",
        "csbm/metis-2/fedavg [lr=0.1]",
    ]


def test_every_block_type_has_a_macro(every_block_report):
    assert set(typing.get_args(Block)) == set(BLOCK_MACROS)
    page = render_html(every_block_report)
    for kind in ("ok", "warn", "info"):
        assert f'<div class="callout {kind}" role="note">verdict {kind}' in page
    assert "<caption>note " in page and "<thead>" in page
    assert re.search(r'<details class="section"><summary><h2 id="s2">folded</h2></summary>', page)

    class Unknown:
        pass

    with pytest.raises(TypeError, match="unknown report block Unknown: add it to"):
        render_html(Report("t", [Section("s", [Unknown()])]))
    with pytest.raises(ValueError, match="callout kind 'danger'"):
        Callout("x", "danger")


def test_report_text_is_escaped_never_markup(every_block_report):
    page = render_html(every_block_report)
    escaped = "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;"
    # <title>, <h1>, nav, heading, paragraph, callout, alt, header, note, preformatted, cells
    assert page.count(escaped) == 10 + 120
    assert "<script" not in page and "onerror=alert(1)>" not in page
    assert len(re.findall(r"<img ", page)) == 1


def test_a_results_folder_value_is_escaped(results, tmp_path, hostile_text):
    from fgl_workbench.storage.store import ResultsStore

    hostile = tmp_path / "hostile"
    shutil.copytree(results, hostile)
    store = ResultsStore(hostile, create=False)
    store.set_meta("suite_name", hostile_text)
    store.close()
    page = build_report(hostile).read_text()
    assert "fgl-workbench report: &#34;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;" in page
    assert "<script" not in page and "onerror=alert(1)>" not in page


def test_the_page_is_self_contained(dp_report):
    page = dp_report.read_text()
    # every resource inline: images as data URIs, links to the page's own sections
    assert re.findall(r'src="([^":]+):', page) == ["data"] * 5
    assert set(re.findall(r'href="(.)', page)) == {"#"}
    assert not re.search(r"<(script|link|iframe|object|embed)\b|url\(|@import", page)


def test_the_report_opens_with_the_auditor_table_and_leaves_out_empty_sections(tmp_path, results):
    from fgl_workbench.reports.content import Table
    from fgl_workbench.reports.report import report_content
    from fgl_workbench.reports.verdict import AUDITOR_HEADER

    first = report_content(results).sections[0]
    assert first.title == "Verdict" and isinstance(first.blocks[0], Table)
    assert first.blocks[0].header == AUDITOR_HEADER
    assert [r[0] for r in first.blocks[0].rows] == ["csbm/louvain-3/fedavg"]
    raw = {
        "name": "alone",
        "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
        "partitions": [{"method": "louvain", "num_clients": 3}],
        "targets": [{"name": "centralized", "params": {"epochs": 2}}],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    titles = [s.title for s in report_content(tmp_path).sections]
    # no message sent, no attack run: nothing to say of communication or attacks
    assert titles == ["Verdict", "Setup", "Utility", "Methods glossary", "Suite configuration"]


def test_rows_without_both_classes_leave_the_score_histograms_out(results, tmp_path):
    """A records file emptied (or of one class) draws nothing: the section is left out, and
    the report is built (it ended in a traceback)."""
    import shutil

    import numpy as np

    from fgl_workbench.reports.report import report_content
    from fgl_workbench.storage.records import ScoredRecords, write_records

    folder = tmp_path / "copy"
    shutil.copytree(results, folder)
    for path in folder.glob("artifacts/*/*.records.npz"):
        with open(path, "wb") as f:
            write_records(f, ScoredRecords(np.zeros(0, int), np.zeros(0), np.zeros(0, bool)))
    titles = [s.title for s in report_content(folder).sections]
    assert "ROC curves" in titles and "Score histograms" not in titles
