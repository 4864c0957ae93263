"""The content of a results folder's report, read from its store: the auditor table and the
verdicts, setup and data statistics, utility, communication cost, the attack × configuration
heatmap, ROC curves with DP ceilings, privacy–utility curves, the audit gap and a methods
glossary; a section that would say nothing for the run (no message sent, no attack run) is
left out. ``build_report`` writes it as one self-contained HTML file and as a PDF."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import yaml

from fgl_workbench.attacks.metrics import ROC, roc_levels
from fgl_workbench.audits.stored import bound_text, verdict_text
from fgl_workbench.defenses.base import COVERING_UNITS
from fgl_workbench.errors import WorkbenchError
from fgl_workbench.registry import reading_untrusted
from fgl_workbench.reports.content import (
    Block,
    Callout,
    Figure,
    Paragraph,
    Preformatted,
    Report,
    Section,
    Table,
)
from fgl_workbench.reports.glossary import glossary_rows
from fgl_workbench.reports.intervals import (
    attack_tables,
    chance_line,
    lower_bound,
    strongest_with_uncertainty,
    with_interval,
)
from fgl_workbench.reports.plots import (
    CommunicationCost,
    RocCurve,
    communication_figure,
    fpr_span,
    heatmap_figure,
    mean_roc,
    resolution,
    roc_band,
    roc_figure,
    score_histogram_figure,
)
from fgl_workbench.reports.summary import (
    accuracy_interval,
    across_seeds,
    attacks_across_seeds,
    built_in_family,
    cell_labels,
    configurations,
    format_interval,
    format_pm,
    natural_key,
    seed_text,
)
from fgl_workbench.reports.tradeoff import strongest_attacks, tradeoff_figure, tradeoff_points
from fgl_workbench.reports.verdict import (
    AUDITOR_HEADER,
    EXTERNAL_TARGET,
    adversary_of,
    auditor_rows,
    verdicts,
)
from fgl_workbench.storage import rows as checks
from fgl_workbench.storage.records import read_records, records_artifact
from fgl_workbench.storage.store import (
    CALIBRATED_SIGMA,
    EXTERNAL,
    SANDBOXED_MARK,
    STORE_FILE,
    TRUSTED_MARK,
    AttackRow,
    CellRow,
    ResultsStore,
    inside,
    metric_figure,
    plugin_mark,
    written,
)

HTML_FILE = "report.html"
PDF_FILE = "report.pdf"


def build_report(out_dir: str | Path, sources: Sequence[str | Path] | None = None) -> Path:
    """Writes ``report.html`` and ``report.pdf`` (the same page laid out by WeasyPrint) into
    ``out_dir``, from the results folder ``out_dir`` or, to compare several, from ``sources``;
    returns the HTML's path. Where WeasyPrint cannot load, the HTML alone, a line on stderr
    saying how to get the PDF, and no stale PDF left beside it."""
    from fgl_workbench.reports.html import render_html
    from fgl_workbench.reports.pdf import PdfUnavailable, load_weasyprint, write_pdf

    out_dir = Path(out_dir)
    folders = [Path(f) for f in sources] if sources else [out_dir]
    with reading_untrusted("the results folder " + ", ".join(map(str, folders))):
        report = report_content(folders)
    try:
        page = render_html(report)
    finally:
        for fig in report.figures():
            plt.close(fig)
    out_dir.mkdir(parents=True, exist_ok=True)
    with written(out_dir, HTML_FILE) as f:
        f.write(page.encode())
    try:
        load_weasyprint()
    except PdfUnavailable as exc:
        inside(out_dir, PDF_FILE).unlink(missing_ok=True)
        print(f"{PDF_FILE} skipped: {exc}", file=sys.stderr)
    else:
        with written(out_dir, PDF_FILE) as f:
            write_pdf(page, f)
    return out_dir / HTML_FILE


@dataclass(frozen=True)
class Results:
    """What a report reads from one or several results folders. Compared folders keep their
    cells apart: each cell's config gains ``results`` (the folder's name), so the same suite in
    two folders makes two configurations, and its ids are prefixed with that name."""

    cells: list[CellRow]
    attacks: list[AttackRow]
    rocs: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]  # (cell id, attack key) → ROC
    # (cell id, attack key) → its per-record scores' file, read only for the panels drawn
    records: dict[tuple[str, str], Path]
    names: list[str]  # each folder's suite name
    suites: list[dict]
    reproducible: list[bool]
    # each folder: audits of models trained outside the workbench (fgl_workbench.external)
    external: list[bool] = field(default_factory=list)


def load_results(folders: Sequence[Path], rocs: bool = True) -> Results:
    """Reads every folder's store (cells, attacks, suite, and the ROC arrays and per-record
    scores unless ``rocs`` is False: the summary tables need none); several folders are told
    apart as ``Results`` says."""
    tags = _folder_tags(folders)
    cells, attacks, curves, records = [], [], {}, {}
    names, suites, reproducible, external = [], [], [], []
    for folder, tag in zip(folders, tags, strict=True):
        if not (folder / STORE_FILE).is_file():
            raise WorkbenchError(
                f"no results store in {folder} (expected {folder / STORE_FILE}); "
                "run `fgl-workbench run SUITE.yaml --out DIR` first"
            )
        store = ResultsStore(folder, read_only=True)
        try:
            mine, theirs = store.cells(), store.attacks()
            prefix = "" if tag is None else f"{tag}:"
            for a in theirs if rocs else ():
                path = inside(folder, records_artifact(a.cell_id, a.attack_key))
                if path.is_file():
                    records[(prefix + a.cell_id, a.attack_key)] = path
            names.append((store.meta("suite_name") or folder.name)[: checks.TEXT_CAP])
            suites.append(store.suite())
            reproducible.append(store.meta("reproducible") == "1")
            external.append(store.meta(EXTERNAL) is not None)
            if tag is not None:
                mine = [_tagged_cell(c, tag) for c in mine]
                theirs = [replace(a, cell_id=f"{tag}:{a.cell_id}") for a in theirs]
            if rocs:
                curves |= {
                    (a.cell_id, a.attack_key): store.load_roc(a.artifact)
                    for a in theirs
                    if a.artifact
                }
        finally:
            store.close()
        cells += mine
        attacks += theirs
    return Results(cells, attacks, curves, records, names, suites, reproducible, external)


def _folder_tags(folders: Sequence[Path]) -> list[str | None]:
    """None for a single folder; else each folder's name, numbered where names repeat."""
    if len(folders) == 1:
        return [None]
    names = [f.resolve().name for f in folders]
    return [n if names.count(n) == 1 else f"{i + 1}-{n}" for i, n in enumerate(names)]


def _tagged_cell(c: CellRow, tag: str) -> CellRow:
    return replace(c, cell_id=f"{tag}:{c.cell_id}", config={**c.config, "results": tag})


def report_content(folders: Path | Sequence[Path]) -> Report:
    folders = [folders] if isinstance(folders, Path) else list(folders)
    found = load_results(folders)
    cells, attacks = found.cells, found.attacks
    delta = max(s.get("delta", 1e-5) for s in found.suites)
    curves = roc_curves(found.rocs, cells, attacks, delta)
    labels = cell_labels(cells)
    cells = sorted(cells, key=lambda c: natural_key(labels[c.cell_id]))
    sections = [
        _verdicts(cells, attacks, delta, curves),
        _setup(cells, labels),
        _utility(cells, labels),
    ]
    # a section that would say nothing for this run is left out
    if any(c.comm["bytes"]["up"] + c.comm["bytes"]["down"] for c in cells):
        sections.append(_communication(cells))
    if attacks:
        sections.append(_attacks(cells, attacks, labels))
    if curves:
        sections.append(_roc(curves))
    histograms = _score_histograms(found.records, cells, attacks)
    if histograms is not None:
        sections.append(histograms)
    if any(c.epsilons or c.metric_epsilons for c in cells):
        sections.append(_epsilons(cells, labels))
    if any(c.audits for c in cells):
        sections.append(_canary_audits(cells, labels))
    sections += _privacy(cells, attacks)
    names = {c.config["target"]["name"] for c in cells}
    names |= {d["name"] for c in cells for d in c.config["target"].get("defenses", [])}
    names |= {a.attack for a in attacks}
    sections.append(
        Section("Methods glossary", [Table(["term", "meaning"], glossary_rows(sorted(names)), 2)])
    )
    if attacks:
        sections.append(_every_attack(attacks, labels))
    texts = [
        yaml.safe_dump(suite, sort_keys=False, default_flow_style=None, width=100)
        for suite in found.suites
    ]
    if len(folders) > 1:
        texts = [f"# {f}\n{t}" for f, t in zip(folders, texts, strict=True)]
    sections.append(Section("Suite configuration", [Preformatted(t) for t in texts], folded=True))
    sections[0].blocks.insert(1, _intro(found, cells, attacks, delta, folders))  # after the table
    title = found.names[0] if len(folders) == 1 else "comparing " + ", ".join(found.names)
    return Report(f"fgl-workbench report: {title}", sections)


def _intro(
    found: Results,
    cells: list[CellRow],
    attacks: list[AttackRow],
    delta: float,
    folders: Sequence[Path],
) -> Paragraph:
    compared = (
        ""
        if len(folders) == 1
        else f"Compares {len(folders)} results folders ("
        + ", ".join(str(f) for f in folders)
        + "); each configuration is labelled with its folder where two folders share it. "
    )
    if all(found.external):
        streams = (
            "The models were trained outside the workbench (target: external) and audited "
            "with fgl_workbench.external; their accuracy is on the non-members asked about, "
            "and the audit's own draws (non-members, reference models, attacks) derive from "
            "its seed."
        )
    elif all(found.reproducible):
        streams = (
            "Reproducible run: every random stream (partition, training, DP noise, challenges, "
            "attacks) derives from the public seed, so anyone holding the suite can rebuild them."
        )
    elif not any(found.reproducible):
        streams = (
            "Random streams derive from a secret run key (OS entropy) kept in the folder: "
            "no attack could rebuild the partition or the DP noise from the public seed."
        )
    else:
        streams = "Some folders are reproducible runs, others draw from a secret run key."
    return Paragraph(
        compared
        + f"{len(cells)} trained cell(s) in {len(configurations(cells))} configuration(s), "
        f"{len(attacks)} attack result(s); ε is reported at δ = {delta:g}. "
        "Everything shown is read from the results store. " + streams + plugin_notes(attacks)
    )


def plugin_notes(attacks: list[AttackRow]) -> str:
    """The sentence that explains the marks on plug-in rows, where there are any."""
    marks = {plugin_mark(a.fence) for a in attacks if a.fence is not None}
    text = ""
    if SANDBOXED_MARK in marks:
        text += (
            f" Rows marked [{SANDBOXED_MARK}] come from third-party attacks run in a worker the "
            "kernel fenced off (Landlock, namespaces) from the results folder, the data root "
            "and the runner. What another plug-in run on this machine saw can still reach them "
            "through the kernel's page cache (which files it read), which no process fence "
            "closes, so a plug-in row may show more than its own adversary could learn; "
            "compare it with a built-in attack of the same adversary."
        )
    if TRUSTED_MARK in marks:
        text += (
            f" Rows marked [{TRUSTED_MARK}] come from third-party attacks run without a fence "
            "(--trust-plugins): they could read everything the user can, ground truth "
            "included, so their numbers are only as honest as the plug-in."
        )
    return text


def _verdicts(
    cells: list[CellRow], attacks: list[AttackRow], delta: float, curves: list[RocCurve]
) -> Section:
    blocks: list[Block] = [
        Paragraph(
            "One paragraph per configuration: how its membership and link attacks read, in the "
            "words of the tables' reading column (leaks: the AUC's 95 % interval lies above "
            "the chance line's, 0.5 where none is stated; at chance: within the chance AUC ± "
            "0.05; inconclusive: neither), the strongest adversary"
            " at low FPR (TPR at 1 % FPR with its 95 % interval, the AUC beside it), the ε the "
            "run states against each party and per privacy unit, and the accuracy with its "
            "95 % interval beside the undefended twin's. Green: a DP configuration where every "
            "attack reads at chance; orange: something leaks, or a warning stands; blue: "
            "anything else (an inconclusive row is no evidence of safety)."
        )
    ]
    found = verdicts(cells, attacks, delta, curves)
    blocks.insert(
        0,
        Table(
            AUDITOR_HEADER,
            auditor_rows(found),
            len(AUDITOR_HEADER),  # phrases more than figures: every column reads left to right
            note="What an auditor reads first: one row per configuration, the undefended "
            f"baselines first; ε by the RDP accountant at δ = {delta:g}; the strongest attack "
            "at 1 % FPR; reading: how many membership and link attacks read each way.",
        ),
    )
    for v in found:
        text = v.text + ("" if not v.warnings else " Warnings: " + " ".join(v.warnings))
        text += "" if not v.notes else " Note: " + " ".join(v.notes)
        blocks.append(Callout(text, v.kind))
    return Section("Verdict", blocks)


def _setup(cells: list[CellRow], labels: dict[str, str]) -> Section:
    compared = any("results" in c.config for c in cells)
    return Section(
        "Setup",
        [
            Table(
                ["results folder"] * compared
                + ["cell", "dataset", "partition", "clients", "aux pool", "target", "seed"],
                [
                    ([c.config["results"]] if compared else [])
                    + [
                        labels[c.cell_id],
                        c.config["dataset"]["name"],
                        c.config["partition"]["method"],
                        str(c.config["partition"]["num_clients"]),
                        str(c.config["partition"]["aux_fraction"]),
                        "+".join(
                            [c.config["target"]["name"]]
                            + [d["name"] for d in c.config["target"].get("defenses", [])]
                        ),
                        str(c.config["seed"]),
                    ]
                    for c in cells
                ],
                2 + compared,
            ),
            Paragraph(
                "Data statistics per dataset and partition (first seed): records held by "
                "the clients with their train/validation/test split, edges inside clients "
                "(node level) and the clients' mean edge homophily."
            ),
            Table(
                [
                    "dataset/partition",
                    "clients",
                    "records",
                    "train/val/test",
                    "smallest–largest client",
                    "classes",
                    "edges in clients",
                    "homophily",
                ],
                _data_statistics(cells),
                1,
            ),
        ],
    )


def _data_statistics(cells: list[CellRow]) -> list[list[str]]:
    rows, seen = [], set()
    for c in sorted(cells, key=lambda c: c.config["seed"]):
        key = "/".join(c.label.split("/")[:2])
        if key in seen:
            continue
        seen.add(key)
        parts = c.partition
        sizes = [p["size"] for p in parts]
        homophily = [p["edge_homophily"] for p in parts if p["edge_homophily"] is not None]
        rows.append(
            [
                key,
                str(len(parts)),
                str(sum(sizes)),
                "/".join(
                    str(sum(p[k] for p in parts)) for k in ("num_train", "num_val", "num_test")
                ),
                f"{min(sizes)}–{max(sizes)}",
                str(len(parts[0]["label_histogram"])) if parts else "0",
                str(sum(p["num_edges"] for p in parts)),
                f"{np.mean(homophily):.3f}" if homophily else "n/a",
            ]
        )
    return rows


def _utility(cells: list[CellRow], labels: dict[str, str]) -> Section:
    blocks = [
        Paragraph(
            "Accuracy and macro-F1 of the released global model on the clients' test sets "
            "(weighted by test size; the interval is Wilson's over the test records) and ROC "
            "AUC pooled over them, at the round selected on "
            "validation. ε is shown only when the privacy ledger holds DP events: the "
            "accountant's ε at the suite's δ (with the noise multiplier σ a defense's "
            "target_epsilon was calibrated to: the largest finite ε over adversaries and units "
            "meets it), metric-DP's ε(ρ) at the k-NN percentile ρ, or the information "
            "bottleneck's KL term (no formal guarantee)."
            + (
                " A model trained outside the workbench (target external) is measured on the "
                "non-members its audit asked about, as it serves them; the workbench saw none "
                "of its training (no rounds, no training time)."
                if any(c.config["target"]["name"] == EXTERNAL_TARGET for c in cells)
                else ""
            )
        ),
        Table(
            [
                "cell",
                "accuracy",
                "accuracy 95% CI",
                "macro-F1",
                "AUC",
                "best round",
                "rounds",
                "ε",
                "train s",
            ],
            [
                [
                    labels[c.cell_id],
                    _f(c.utility.get("accuracy")),
                    format_interval(accuracy_interval([c]), 1.0, 3),
                    _f(c.utility.get("macro_f1")),
                    _f(c.utility.get("auc")),
                    _f(c.utility.get("best_round"), 0),
                    str(c.comm["rounds"]),
                    privacy_figure(c),
                    _f(c.seconds_train, 1),
                ]
                for c in cells
            ],
            1,
        ),
    ]
    summary = across_seeds(cells)
    if any(len(s.seeds) > 1 for s in summary):
        blocks += [
            Paragraph("Across seeds: mean ± sample standard deviation, in %."),
            Table(
                ["configuration", "seeds", "accuracy", "accuracy 95% CI", "macro-F1", "AUC"],
                [
                    [
                        s.label,
                        seed_text(s.seeds),
                        format_pm(s.accuracy),
                        format_interval(s.accuracy_ci),
                        format_pm(s.macro_f1),
                        format_pm(s.auc, 1.0, 3),
                    ]
                    for s in summary
                ],
                1,
            ),
        ]
    return Section("Utility", blocks)


def communication_costs(cells: list[CellRow]) -> list[CommunicationCost]:
    """Bytes per round and in total from each cell's transcript, mean over seeds."""
    out = []
    for label, group in configurations(cells):
        rounds = np.mean([max(c.comm["rounds"], 1) for c in group])
        up = np.mean([c.comm["bytes"]["up"] / max(c.comm["rounds"], 1) for c in group])
        down = np.mean([c.comm["bytes"]["down"] / max(c.comm["rounds"], 1) for c in group])
        total = np.mean([c.comm["bytes"]["up"] + c.comm["bytes"]["down"] for c in group])
        out.append(CommunicationCost(label, float(rounds), float(up), float(down), float(total)))
    return sorted(out, key=lambda c: natural_key(c.configuration))


def _communication(cells: list[CellRow]) -> Section:
    costs = communication_costs(cells)
    return Section(
        "Communication",
        [
            Paragraph(
                "Bytes each configuration sent, from its transcript (every message recorded "
                "with its size; encrypted uploads at their ciphertext size), mean over seeds."
            ),
            Figure(communication_figure(costs), "communication cost per configuration"),
            Table(
                ["configuration", "rounds", "KB up / round", "KB down / round", "MB total"],
                [
                    [
                        c.configuration,
                        f"{c.rounds:.0f}",
                        f"{c.up_per_round / 1e3:.1f}",
                        f"{c.down_per_round / 1e3:.1f}",
                        f"{c.total / 1e6:.2f}",
                    ]
                    for c in costs
                ],
                1,
            ),
        ],
    )


def _attacks(cells: list[CellRow], attacks: list[AttackRow], labels: dict[str, str]) -> Section:
    summary = attacks_across_seeds(cells, attacks)
    configs = sorted({r.cell for r in summary}, key=natural_key)
    names = sorted({r.attack for r in summary})
    matrices = {}
    for title, metric in (("AUC", "auc"), ("TPR at 1% FPR", "tpr@0.01")):
        m = np.full((len(configs), len(names)), np.nan)
        for r in summary:
            if metric in r.metrics:
                m[configs.index(r.cell), names.index(r.attack)] = r.metrics[metric][0]
        matrices[title] = m
    family_tables = []
    for family, header, body in attack_tables(cells, attacks):
        family_tables += [Paragraph(f"{family.capitalize()} attacks:"), Table(header, body)]
    return Section(
        "Attacks",
        [
            Paragraph(
                "Attack × configuration: mean over seeds of the AUC (scale 0.5 to 1) and of the TPR"
                " at 1% FPR (scale 0 to 1, so a chance-level 0.01 stays pale; grey: not applicable,"
                " or fewer than 100 non-members). The tables give mean ± std over seeds (the mean "
                "alone for one seed; the AUC and each TPR with its 95 % interval, over seeds or one"
                " seed's stratified bootstrap, in which the TPR's threshold is re-chosen), one per "
                "attack family; the chance AUC, where the challenge states it, is that of a "
                "distinguisher that sees only non-private facts (degree, class, split), the line an"
                " attack's AUC must clear. Membership: ε lb is the empirical lower bound on ε from "
                "a threshold chosen on half the records and bounded on the other half with "
                'Clopper–Pearson intervals ("not certifiable at this size": even a perfect '
                'attack could certify nothing on these counts; "none certified": this one did '
                "not, with the most a perfect one could); client AUC is the "
                "server's attack on each client's upload, scored on that client's records. Link: "
                "AUC on pairs inside one client (against non-edges of the same client), the same "
                "edges against uniformly drawn non-edges (He et al.'s protocol, easier negatives), "
                "and on pairs across clients (edges the partition cut). Reading: leaks (or below "
                "chance) when the AUC's 95% interval (over seeds, or one seed's own) lies above "
                "(below) the chance line's interval (0.5 where the challenge states none), at "
                "chance when it stays within the chance AUC ± 0.05, otherwise inconclusive: "
                "not evidence of a small leak. Attribute: accuracy beside always guessing the "
                "prior's most likely value. Distribution: total-variation distance between inferred"
                " and true client label distributions, beside the prior's. Client data and feature:"
                " how close reconstructed node features are to the true ones (cosine; AUC of "
                "ranking a binary row's present features first) beside guessing the auxiliary mean,"
                " and reconstructed labels beside the prior's mode. Every cell's own numbers are in"
                " the section after the glossary."
            ),
            *(
                [
                    Figure(
                        heatmap_figure(configs, names, matrices), "attack by configuration heatmap"
                    )
                ]
                if any(np.isfinite(m).any() for m in matrices.values())
                else []
            ),
            *family_tables,
        ],
    )


def _every_attack(attacks: list[AttackRow], labels: dict[str, str]) -> Section:
    chance = any((a.metrics or {}).get("chance_auc") is not None for a in attacks)
    header = ["cell", "attack", "status", "AUC", "95% CI"] + ["chance AUC [95% CI]"] * chance
    header += ["advantage", "TPR@10% [95% CI]", "TPR@1% [95% CI]", "TPR@0.1% [95% CI]"]
    header += ["bal. acc.", "ε lb", "client AUC"]
    return Section(
        "Every attack result",
        [Table(header, [_attack_cells(a, labels, chance) for a in attacks])],
        folded=True,
    )


def _attack_cells(a: AttackRow, labels: dict[str, str], chance: bool) -> list[str]:
    """One attack result as the last section's row."""
    metrics = a.metrics or {}
    rows = [metrics] if a.status == "ok" and metrics else []
    return [
        labels.get(a.cell_id, a.cell_id),
        a.label,
        a.status if a.status == "ok" else f"n/a: {a.reason}",
        _f(metrics.get("auc")),
        _interval(metrics),
        *([chance_line(rows) or "n/a"] if chance else []),
        _f(metrics.get("advantage")),
        *(with_interval(rows, k) for k in ("tpr@0.1", "tpr@0.01", "tpr@0.001")),
        _f(metrics.get("balanced_accuracy")),
        lower_bound(rows) if metrics.get("epsilon_lb") is not None else "n/a",
        _f(metrics.get("client_auc_mean")),
    ]


def roc_curves(
    rocs: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]],
    cells: list[CellRow],
    attacks: list[AttackRow],
    delta: float,
) -> list[RocCurve]:
    """Each configuration's ROC per attack, averaged over seeds; with the DP ceiling where the
    run's ε bounds what the attack infers (membership: not under edge-level DP alone; links:
    not under record-level DP-SGD alone)."""
    config_of = {c.cell_id: (label, group) for label, group in configurations(cells) for c in group}
    grouped: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    counts: dict[tuple[str, str], list[tuple[int, int] | None]] = defaultdict(list)
    for a in attacks:
        if (a.cell_id, a.attack_key) in rocs and a.cell_id in config_of:
            key = (config_of[a.cell_id][0], a.label)
            grouped[key].append(rocs[(a.cell_id, a.attack_key)])
            counts[key].append(_class_sizes(a.metrics))
    groups = dict(configurations(cells))
    attack_names = {a.label: a.attack for a in attacks}
    params_of = {a.label: a.params for a in attacks}
    out = []
    for (label, attack), rocs in sorted(grouped.items()):
        group = groups[label]
        name = attack_names.get(attack, "")
        family = built_in_family(name) or ""  # a plug-in's is not known here: no ceiling
        units = COVERING_UNITS.get(family, set())
        who = adversary_of(params_of[attack])
        eps = [c.epsilon_against(who, units) for c in group]
        finite = [e for e in eps if e is not None and np.isfinite(e)]
        ceiling = (max(finite), delta) if finite and len(finite) == len(eps) else None
        fpr, tpr = mean_roc(rocs)
        band = _band(rocs, counts[(label, attack)])
        out.append(RocCurve(label, attack, fpr, tpr, len(rocs), ceiling, resolution(rocs), band))
    return out


def _class_sizes(metrics: dict | None) -> tuple[int, int] | None:
    """Members and non-members an attack was scored on, where its row states them."""
    sizes = [(metrics or {}).get(k) for k in ("members", "nonmembers")]
    return None if None in sizes else (int(sizes[0]), int(sizes[1]))


def _band(
    rocs: list[tuple[np.ndarray, np.ndarray]], sizes: list[tuple[int, int] | None]
) -> tuple[np.ndarray, np.ndarray] | None:
    """The mean ROC's 95 % band, resampled from the stored curves; None where a seed's row
    does not state its class sizes (a folder written before they were stored)."""
    if None in sizes:
        return None
    levels = [
        roc_levels(ROC(fpr, tpr), *size) for (fpr, tpr), size in zip(rocs, sizes, strict=True)
    ]
    return roc_band(levels)


def _roc(curves: list[RocCurve]) -> Section:
    return Section(
        "ROC curves",
        [
            Paragraph(
                "Log-log ROC per attack, mean over seeds, one colour per target (shades for the "
                "settings of a sweep), drawn from the smallest FPR its non-members resolve (1 / "
                "their number; below it a curve would be interpolation). Shaded: its pointwise "
                "95 % band (members and non-members resampled, thresholds re-chosen; over seeds, "
                "the replicates averaged). Dashed: the highest TPR any attack can reach against the"
                " run's (ε, δ) for that attack's adversary, drawn only where an ε against that "
                "adversary protects a whole client, a record or a node (edge-level ε does not bound"
                " membership; the server under central DP-FedAvg has ε = ∞, so no ceiling). Only "
                "a band wholly above its ceiling (crosses) contradicts the accounting: at low FPR "
                "the line rests on a few non-members, and one false positive more or less moves it."
            ),
            Figure(roc_figure(curves), "membership inference ROC curves"),
            *[Paragraph(text) for text in ceiling_findings(curves)],
        ],
    )


HISTOGRAM_PANELS = 12  # a large suite's first panels; every row's scores stay in the folder


def _score_histograms(
    records: dict[tuple[str, str], Path], cells: list[CellRow], attacks: list[AttackRow]
) -> Section | None:
    """Member and non-member scores per configuration × membership attack, pooled over its
    seeds: how far apart the two classes sit, which a single AUC hides. Files are read only
    until ``HISTOGRAM_PANELS`` panels hold both classes; None where none does."""
    config_of = {c.cell_id: label for label, group in configurations(cells) for c in group}
    pooled: dict[tuple[str, str], list[Path]] = defaultdict(list)
    for a in attacks:
        if (a.cell_id, a.attack_key) in records and a.cell_id in config_of:
            pooled[(config_of[a.cell_id], a.label)].append(records[(a.cell_id, a.attack_key)])
    shown = []
    for (label, attack), paths in sorted(pooled.items(), key=lambda kv: natural_key(kv[0][0])):
        if len(shown) == HISTOGRAM_PANELS:
            break
        rs = [read_records(p) for p in paths]
        member = np.concatenate([r.is_member for r in rs])
        if member.any() and not member.all():  # both classes to compare
            shown.append((f"{label} · {attack}", np.concatenate([r.scores for r in rs]), member))
    if not shown:
        return None
    note = (
        f" The first {len(shown)} of {len(pooled)} configuration × attack pairs are drawn; "
        "every row's scores are in the folder (fgl_workbench.external.audit_stored)."
        if len(pooled) > len(shown)
        else ""
    )
    return Section(
        "Score histograms",
        [
            Paragraph(
                "Each membership attack's scores of members and of non-members, per "
                "configuration, pooled over its seeds, each class as a share of itself. Where "
                "the two overlap, no threshold tells them apart; a tail of members beyond every "
                "non-member is what a low-FPR TPR counts." + note
            ),
            Figure(score_histogram_figure(shown), "member and non-member score histograms"),
        ],
    )


def ceiling_findings(curves: list[RocCurve]) -> list[str]:
    """What the ROC figure says of the DP ceilings, in words: each crossing by a band (a
    violation), each line above its ceiling whose band reaches below it (noise), or that no
    curve crosses."""
    out = []
    for c in curves:
        band, line = c.above_ceiling(), c.above_ceiling(line=True)
        where = f"{c.attack} on {c.configuration}"
        if band.size:
            out.append(
                f"{where}: the 95 % band lies wholly above the DP ceiling (ε = "
                f"{c.ceiling[0]:.3g}) at FPR {fpr_span(band)}: the attack does better than that "
                "ε allows, so the accounting or the defense's implementation is wrong."
            )
        elif line.size:
            out.append(
                f"{where}: the line rises above the DP ceiling (ε = {c.ceiling[0]:.3g}) at FPR "
                f"{fpr_span(line)}, but its 95 % band reaches below the ceiling there: sampling "
                "noise at the tail, not a violation."
            )
    banded = [c for c in curves if c.ceiling is not None and c.band is not None]
    if banded and not any(c.above_ceiling().size for c in banded):
        out.append("No band lies above its DP ceiling: nothing here contradicts the accounting.")
    return out


def _privacy(cells: list[CellRow], attacks: list[AttackRow]) -> list[Section]:
    points = tradeoff_points(cells, attacks)
    figure = tradeoff_figure(points)
    if figure is None:
        return []
    header, rows = strongest_with_uncertainty(strongest_attacks(points), cells, attacks)
    return [
        Section(
            "Privacy–utility and the audit gap",
            [
                Paragraph(
                    "Mean over seeds. The privacy figure is the accountant's ε against a "
                    "querier of the released model, per the coarsest unit its ledger states "
                    "(named with each value; the ε table gives every adversary), else "
                    "metric-DP's ε(ρ) against a querier, else the information bottleneck's KL "
                    "term (an ∞ has no place on the log axis: such a configuration is drawn "
                    "as a reference line, like an undefended one); "
                    "undefended configurations are dotted reference lines. The last panel is "
                    "the audit gap: each attack's empirical lower bound on ε against the "
                    "accountant's ε; a correct accountant's ε stays above every lower bound."
                ),
                Figure(figure, "privacy-utility curves and audit gap"),
                Paragraph("The strongest attack against each configuration, by each metric."),
                Table(header, rows, 1),
            ],
        )
    ]


def _epsilons(cells: list[CellRow], labels: dict[str, str]) -> Section:
    """Every DP cell's ε per adversary and privacy unit, with what each rests on."""
    rows = [
        [
            labels[c.cell_id],
            e["adversary"],
            e["unit"],
            format_epsilon(e["epsilon"]),
            "–" if e.get("epsilon_pld") is None else format_epsilon(e["epsilon_pld"]),
            e["note"],
        ]
        for c in cells
        for e in c.epsilons
    ]
    rows += [
        [
            labels[c.cell_id],
            e["adversary"],
            f"{e['unit']} (metric-DP)",
            metric_figure(e),
            "–",
            e["note"],
        ]
        for c in cells
        for e in c.metric_epsilons
    ]
    return Section(
        "ε per adversary",
        [
            Paragraph(
                "Whom each ε protects. server: the honest-but-curious server; clients: any "
                "other client; querier: an external querier of the released model. A unit is "
                "what two neighbouring datasets differ in (a whole client's data, a node with "
                "its edges, one training record, one edge). ∞: that party sees private data "
                "without noise, or no DP mechanism protects that unit against it (the note says "
                "which). Amplification by subsampling is claimed only against parties who do "
                "not see the sample. ε (RDP) is the Rényi-DP accountant's bound, the figure "
                "used everywhere else; ε (PLD) is Google's dp_accounting privacy-loss-"
                "distribution accountant on the same events, a valid and usually tighter bound, "
                "shown where it is finite and at most the RDP figure (–: an ∞ row, an RDP ε "
                "above 50, noise too weak or steps too many for the PLD discretisation, or a "
                "folder written before PLD figures were stored). Metric-DP rows give ε(ρ): two "
                "nodes whose released vectors lie within ρ are indistinguishable to that party, "
                "∞ where it sees them, or what they would hide, in the clear."
            ),
            Table(["cell", "adversary", "unit", "ε (RDP)", "ε (PLD)", "rests on"], rows, 1),
        ],
    )


def _canary_audits(cells: list[CellRow], labels: dict[str, str]) -> Section:
    """Each DP cell's canary-audit lower bounds beside the ε its ledger claims."""
    rows = [
        [
            labels[c.cell_id],
            a["defense"],
            a["adversaries"],
            a["unit"],
            bound_text(a),
            format_epsilon(a["claimed"]),
            verdict_text(a),
            f"{a['correct']}/{a['guesses']} of {a['canaries']}",
            a["mechanism"],
        ]
        for c in cells
        for a in c.audits
    ]
    return Section(
        "Canary audit: lower bound vs claimed ε",
        [
            Paragraph(
                "Each DP mechanism the cell ran is run again by its defense's own code at the "
                "cell's parameters, through the target's own sampling, on canaries (clients, "
                "records, edges, nodes or embedding pairs), each included with probability "
                "1/2; the auditor scores them from every release the named adversaries "
                "observe (each round's model, each upload, each step, each hop), guesses the "
                "extremes, and turns the correct guesses into lower bounds on ε at the cell's "
                "δ (Steinke, Nasr & Jagielski 2023; the f-DP test of Mahloujifar, Melis & "
                "Chaudhuri 2025) and on a Gaussian-DP μ, and tests the claim's whole privacy "
                "profile; every test holds together, per cell, with 95 % confidence. A bound "
                "above the claim, or a rejected profile, means the mechanism leaks more than "
                "its ledger says. A bound is not an estimate of ε: m canaries cap it (the "
                "ceiling: what every guess right would certify), so a bound under the claim "
                "never means the claim is tight, and with too few canaries nothing is "
                "certifiable at all."
            ),
            Table(
                [
                    "cell",
                    "defense",
                    "adversaries",
                    "unit",
                    "lower bounds (ceiling)",
                    "claimed ε",
                    "verdict",
                    "correct guesses",
                    "game",
                ],
                rows,
                1,
            ),
        ],
    )


def format_epsilon(value: float) -> str:
    return "∞" if not np.isfinite(value) else f"{value:.3g}"


def privacy_figure(c: CellRow) -> str:
    """The cell's privacy figure: the accountant's ε, metric-DP's ε(ρ), or the information
    bottleneck's KL term (no formal guarantee); "no DP" otherwise."""
    parts = []
    querier = c.querier_row()
    if querier is not None:
        parts.append(f"querier ε = {format_epsilon(querier['epsilon'])} per {querier['unit']}")
    if CALIBRATED_SIGMA in c.utility:
        parts.append(f"σ {c.utility[CALIBRATED_SIGMA]:.4g} calibrated to {calibrated_for(c)}")
    metric = c.querier_row(metric=True)
    if metric is not None:
        parts.append(f"querier metric-DP {metric_figure(metric)} per {metric['unit']}")
    if "ib_kl_nats" in c.utility:
        parts.append(f"IB KL {c.utility['ib_kl_nats']:.2f} nats")
    return "; ".join(parts) or "no DP"


def calibrated_for(c: CellRow) -> str:
    """The target a cell's σ was calibrated to, as its suite entry wrote it."""
    for d in c.config["target"].get("defenses") or []:
        goal = d.get("params", {}).get("target_epsilon")
        if goal is not None:
            return f"ε ≤ {goal:g} ({d['name']})"
    return "a target ε"


def _interval(metrics: dict | None) -> str:
    if not metrics or metrics.get("auc_ci_low") is None:
        return "n/a"
    return f"[{metrics['auc_ci_low']:.3f}, {metrics['auc_ci_high']:.3f}]"


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"
