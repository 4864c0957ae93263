"""The self-contained HTML report of a results folder: setup, utility, communication, attack
results and ROC curves. Everything shown is read from the results store."""

from __future__ import annotations

import html
import json
from pathlib import Path

from reports.plots import roc_figure
from reports.summary import across_seeds, format_interval, format_pm
from reports.tradeoff import tradeoff_figure, tradeoff_points
from workbench.errors import WorkbenchError
from workbench.store import STORE_FILE, ResultsStore

REPORT_FILE = "report.html"

STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
code{background:#f6f6f6;padding:1px 4px}
"""


def build_report(out_dir: str | Path) -> Path:
    out_dir = Path(out_dir)
    if not (out_dir / STORE_FILE).is_file():
        raise WorkbenchError(
            f"no results store in {out_dir} (expected {out_dir / STORE_FILE}); "
            "run `fgl-workbench run SUITE.yaml --out DIR` first"
        )
    store = ResultsStore(out_dir)
    cells, attacks = store.cells(), store.attacks()
    labels = {c.cell_id: c.label for c in cells}
    curves = [
        (f"{labels.get(a.cell_id, a.cell_id)} · {a.label}", *store.load_roc(a.artifact))
        for a in attacks
        if a.artifact
    ]
    name = store.meta("suite_name") or out_dir.name
    suite_json = store.meta("suite_json") or "{}"
    store.close()

    parts = [
        f"<h1>fgl-workbench report: {_e(name)}</h1>",
        "<h2>Setup</h2>",
        _table(
            ["cell", "dataset", "partition", "clients", "aux pool", "target", "seed"],
            [
                [
                    c.label,
                    c.config["dataset"]["name"],
                    c.config["partition"]["method"],
                    c.config["partition"]["num_clients"],
                    c.config["partition"]["aux_fraction"],
                    c.config["target"]["name"],
                    c.config["seed"],
                ]
                for c in cells
            ],
        ),
        f"<details><summary>Suite configuration</summary><pre>"
        f"{_e(json.dumps(json.loads(suite_json), indent=2))}</pre></details>",
        "<h2>Utility and cost</h2>",
        "<p>Accuracy and macro-F1 of the released global model on the clients' test sets "
        "(weighted by test size) and ROC AUC pooled over them, at the round selected on "
        "validation. Bytes come from the "
        "transcript. ε is shown only when the privacy ledger holds DP events: the "
        "accountant's ε at the suite's δ, metric-DP's ε(ρ) at the k-NN percentile ρ, or the "
        "information bottleneck's KL term (no formal guarantee).</p>",
        _table(
            [
                "cell",
                "accuracy",
                "macro-F1",
                "best round",
                "rounds",
                "MB up",
                "MB down",
                "ε",
                "train s",
            ],
            [
                [
                    c.label,
                    _f(c.utility.get("accuracy")),
                    _f(c.utility.get("macro_f1")),
                    _f(c.utility.get("auc")),
                    _f(c.utility.get("best_round"), 0),
                    c.comm["rounds"],
                    _f(c.comm["bytes"]["up"] / 1e6, 2),
                    _f(c.comm["bytes"]["down"] / 1e6, 2),
                    privacy_figure(c),
                    _f(c.seconds_train, 1),
                ]
                for c in cells
            ],
        ),
        *_seed_table(cells),
        "<h2>Attacks</h2>",
        "<p>TPR at a fixed FPR is <i>n/a</i> when there are fewer than 1/FPR non-members. "
        "AUC with its 95% bootstrap interval; ε lb: the empirical lower bound on ε from the "
        "best ROC point with Clopper–Pearson intervals; client AUC: the server's attack on "
        "each client's upload, scored on that client's records (mean over clients).</p>",
        _table(
            [
                "cell",
                "attack",
                "status",
                "AUC",
                "95% CI",
                "advantage",
                "TPR@10%",
                "TPR@1%",
                "TPR@0.1%",
                "bal. acc.",
                "ε lb",
                "client AUC",
            ],
            [
                [
                    labels.get(a.cell_id, a.cell_id),
                    a.label,
                    a.status if a.status == "ok" else f"n/a: {a.reason}",
                    _f((a.metrics or {}).get("auc")),
                    _interval(a.metrics),
                    *(
                        _f((a.metrics or {}).get(k))
                        for k in (
                            "advantage",
                            "tpr@0.1",
                            "tpr@0.01",
                            "tpr@0.001",
                            "balanced_accuracy",
                            "epsilon_lb",
                            "client_auc_mean",
                        )
                    ),
                ]
                for a in attacks
            ],
        ),
    ]
    if curves:
        parts.append(f'<img alt="ROC curves" src="data:image/png;base64,{roc_figure(curves)}">')
    points = tradeoff_points(cells, attacks)
    figure = tradeoff_figure(points)
    if figure is not None:
        parts += [
            "<h2>Privacy–utility</h2>",
            "<p>Mean over seeds. The privacy figure is the accountant's ε where the run is DP, "
            "else the information bottleneck's KL term; undefended configurations are dotted "
            "reference lines.</p>",
            f'<img alt="privacy-utility curves" src="data:image/png;base64,{figure}">',
        ]
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(name)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>"
    )
    path = out_dir / REPORT_FILE
    path.write_text(page)
    return path


def _seed_table(cells: list) -> list[str]:
    summary = across_seeds(cells)
    if all(len(s.seeds) == 1 for s in summary):
        return []
    return [
        "<h3>Across seeds (mean ± std, %)</h3>",
        _table(
            ["configuration", "seeds", "accuracy", "accuracy 95% CI", "macro-F1", "AUC"],
            [
                [
                    s.label,
                    ",".join(map(str, s.seeds)),
                    format_pm(s.accuracy),
                    format_interval(s.accuracy_ci),
                    format_pm(s.macro_f1),
                    format_pm(s.auc, 1.0, 3),
                ]
                for s in summary
            ],
        ),
    ]


def privacy_figure(c) -> str:
    """The cell's privacy figure: the accountant's ε, metric-DP's ε(ρ), or the information
    bottleneck's KL term (no formal guarantee); "no DP" otherwise."""
    parts = [] if c.epsilon is None else [_f(c.epsilon, 2)]
    if "metric_epsilon" in c.utility:
        parts.append(f"ε(ρ={c.utility['metric_rho']:.3f}) = {c.utility['metric_epsilon']:.2f}")
    if "ib_kl_nats" in c.utility:
        parts.append(f"IB KL {c.utility['ib_kl_nats']:.2f} nats")
    return "; ".join(parts) or "no DP"


def _e(x: object) -> str:
    return html.escape(str(x))


def _interval(metrics: dict | None) -> str:
    if not metrics or metrics.get("auc_ci_low") is None:
        return "n/a"
    return f"[{metrics['auc_ci_low']:.3f}, {metrics['auc_ci_high']:.3f}]"


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th{' class=l' if i == 0 else ''}>{_e(h)}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=l' if i < 2 else ''}>{_e(v)}</td>" for i, v in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"
