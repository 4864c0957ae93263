"""A score audit as a report page: the table of figures with intervals, the log-log ROC with
its 95 % band, member and non-member (or edge and non-edge) score histograms, and the
per-group table; an inference audit as a row of figures beside their baselines; drawn by the
report's own template (HTML) and WeasyPrint (PDF), as a results folder's report is."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt

from fgl_workbench.attacks.metrics import score_levels
from fgl_workbench.external.inference import InferenceAudit, figure_text
from fgl_workbench.external.scores import Question, ScoreAudit, interval_text, number_text
from fgl_workbench.reports.content import Figure, Paragraph, Report, Section, Table
from fgl_workbench.reports.html import render_html
from fgl_workbench.reports.plots import (
    RocCurve,
    mean_roc,
    roc_band,
    roc_figure,
    score_histogram_figure,
)

FIGURES = ("AUC [95 % CI]", "TPR at 1 % FPR", "TPR at 0.1 % FPR")


def audit_sections(audit: ScoreAudit, title: str) -> list[Section]:
    """What a page says of one audit, apart from how it is drawn."""
    neg = int(audit.metrics["nonmembers"] or 0)
    q = audit.question
    fpr, tpr = mean_roc([(audit.roc.fpr, audit.roc.tpr)])  # on the band's grid
    curve = RocCurve(
        audit.name,
        q.name,
        fpr,
        tpr,
        1,
        resolution=1.0 / neg,
        band=roc_band([score_levels(audit.scores, audit.is_member)]),
    )
    sections = [
        Section(
            title,
            [
                Paragraph(
                    "Intervals are 95 % stratified bootstrap intervals (thresholds re-chosen in "
                    "every resample). The ε lower bound is held out: its decision rule is chosen "
                    "on half of the records and bounded on the other half with Clopper–Pearson "
                    f"intervals at δ = {audit.delta:g}, so it is valid at 95 % where the "
                    f"{q.yes} were a random draw from the records asked about; 0 certifies "
                    f"nothing. n/a: fewer {q.no} than 1/FPR"
                    + (
                        "."
                        if q.inclusion
                        else f"; no ε bound: {q.yes} and {q.no} differ before any model sees "
                        "them (not a random inclusion)."
                    )
                ),
                Table(_header(q), [_row("all", audit.metrics)], left_columns=1),
                Figure(roc_figure([curve]), "log-log ROC with its 95 % band"),
                Figure(
                    score_histogram_figure(
                        [(audit.name, audit.scores, audit.is_member)], (q.yes, q.no)
                    ),
                    f"{q.yes} and {q.no}: score histograms",
                ),
            ],
        )
    ]
    if audit.groups or audit.skipped:
        rows = [_row(g, m) for g, m in audit.groups.items()]
        note = "; ".join(f"{g}: {why}" for g, why in audit.skipped.items())
        sections.append(
            Section("Per group", [Table(_header(q), rows, left_columns=1, note=note)], level=3)
        )
    return sections


def inference_section(audits: Sequence[InferenceAudit]) -> Section:
    """One table: each attack's shown figures with their intervals, beside their baselines."""
    rows = [
        [a.name, key, figure_text(a.metrics, key), number_text(a.metrics.get(b)) if b else "",
         a.count]
        for a in audits
        for key, b in a.shown
    ]  # fmt: skip
    note = (
        "95 % Clopper–Pearson intervals on accuracies; the baseline is an adversary who "
        "ignores the model's answers (the most common value it knows)"
    )
    header = ["attack", "figure", "value [95 % CI]", "baseline", "asked about"]
    return Section("Inferred values", [Table(header, rows, note=note)])


def write_report(
    audits: list[ScoreAudit],
    title: str,
    path: Path,
    claims: Sequence[str] = (),
    inferences: Sequence[InferenceAudit] = (),
) -> Path:
    """Writes one page for ``audits`` (a section each, after the privacy ``claims`` the
    training states) and ``inferences`` (one table) as HTML, or as a PDF where ``path`` ends
    in ``.pdf``; returns the path."""
    many = len(audits) + bool(inferences) > 1
    sections = [s for a in audits for s in audit_sections(a, a.name if many else "Every record")]
    if inferences:
        sections.append(inference_section(inferences))
    if claims:
        sections.insert(0, Section("Privacy claimed", [Paragraph(c) for c in claims]))
    report = Report(title, sections)
    try:
        page = render_html(report)
    finally:
        for fig in report.figures():
            plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".pdf":
        from fgl_workbench.reports.pdf import write_pdf

        write_pdf(page, path)
    else:
        path.write_text(page, encoding="utf-8")
    return path


def _header(q: Question) -> list[str]:
    return ["group", q.yes, q.no, *FIGURES, "ε lower bound (ceiling)", "advantage"]


def _row(group: str, m: dict[str, float | None]) -> list[str]:
    return [
        group,
        f"{int(m['members'] or 0)}",
        f"{int(m['nonmembers'] or 0)}",
        interval_text(m, "auc"),
        interval_text(m, "tpr@0.01"),
        interval_text(m, "tpr@0.001"),
        f"{number_text(m['epsilon_lb'], 2)} ({number_text(m['epsilon_lb_ceiling'], 2)})",
        number_text(m["advantage"]),
    ]
