"""Command line: ``fgl-workbench run | audit | attack | report | export | list | epsilon``.
A thin layer over the Python API (``fgl_workbench.interface.api``); user errors print one line
naming what is wrong and exit 2."""

from __future__ import annotations

import argparse
import sys
import textwrap
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fgl_workbench.errors import WorkbenchError
from fgl_workbench.interface import cli_epsilon
from fgl_workbench.running.components import KINDS, listing


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fgl-workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a suite YAML into an output folder")
    _suite_arguments(run)
    run.add_argument(
        "--dry-run", action="store_true", help="print the expanded cells and their count, run none"
    )
    aud = sub.add_parser(
        "audit",
        help="run a suite with the canary audit of every DP cell: lower bounds on ε beside the "
        "claimed ones, per adversary",
    )
    _suite_arguments(aud)
    aud.add_argument(
        "--canaries", type=int, default=None, help="canaries per audited claim (default 1000)"
    )
    rep = sub.add_parser(
        "report",
        help="write report.html and report.pdf from a results folder, or compare several",
    )
    rep.add_argument("folders", nargs="+", metavar="DIR", help="results folders written by run")
    rep.add_argument(
        "--out",
        default=None,
        help="where the report goes (default: the folder; required to compare several)",
    )
    rep.add_argument(
        "--tradeoff-png", default=None, help="also write the privacy-utility figure to this file"
    )
    att = sub.add_parser(
        "attack", help="run attacks on the trained targets a finished run stored (no retraining)"
    )
    att.add_argument("out", help="a results folder written by `run`")
    att.add_argument("--attack", action="append", required=True, help="an attack's name")
    att.add_argument(
        "--params",
        action="append",
        default=[],
        help="JSON parameters of the --attack at the same position (default {})",
    )
    att.add_argument("--data-root", default=None, help="datasets folder (else $FGLWB_DATA)")
    att.add_argument("--jobs", type=int, default=1, help="worker processes for reference models")
    _threads_argument(att)
    _trust_argument(att)
    _device_argument(att)
    _mlflow_arguments(att)
    exp = sub.add_parser(
        "export", help="write a results folder as one table: a row per cell × attack"
    )
    exp.add_argument("out", help="a results folder written by `run`")
    exp.add_argument("--format", default="csv", help="csv (default) or parquet")
    exp.add_argument("--output", default=None, help="file to write (default OUT/results.FORMAT)")
    lst = sub.add_parser("list", help="list registered components")
    lst.add_argument("kind", nargs="?", choices=KINDS)
    lst.add_argument(
        "--import",
        dest="imported",
        action="store_true",
        help="import every component and plug-in and list what the registries hold (slow: "
        "loads torch; checks that each plug-in loads and satisfies its interface)",
    )
    _trust_argument(lst)
    cli_epsilon.add_parser(sub)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        refuse_control_characters(argv)
        return _dispatch(parser.parse_args(argv))
    except WorkbenchError as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: finished cells are in the results store; run the same command "
            "again to resume",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0


def refuse_control_characters(argv: list[str]) -> None:
    """No argument holds a control character (a newline, a carriage return, an escape): none
    belongs in a name or a path, and each would break or rewrite an error line echoing it."""
    for position, arg in enumerate(argv, 1):
        if any(unicodedata.category(c) == "Cc" for c in arg):
            raise WorkbenchError(
                f"argument {position} ({arg!r}): control characters are not accepted"
            )


def printable(message: str) -> str:
    """An error as the terminal gets it: control characters (a name typed with a carriage
    return, an escape sequence read from a folder) escaped, so no input rewrites the line."""
    return "".join(c if c == "\n" or c.isprintable() else repr(c)[1:-1] for c in message)


def _device_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default=None,
        help="auto (a GPU when one is visible), cpu, cuda or cuda:N"
        + " (default: the suite's device:, itself auto; for `attack`, the folder's)",
    )


def _mlflow_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mlflow",
        metavar="URI",
        default=None,
        help="after the run, log every cell of the folder to this MLflow tracking URI, a run "
        "per cell (pip install 'fgl-workbench[mlflow]')",
    )
    p.add_argument(
        "--mlflow-experiment",
        metavar="NAME",
        default=None,
        help="the MLflow experiment (default: the suite's name)",
    )


def _threads_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="intra-op threads per cell (default: OMP_NUM_THREADS if set, else the cores the "
        "machine's load leaves free, shared among --jobs cells; the run states its choice)",
    )


def _trust_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trust-plugins",
        action="store_true",
        help="run plug-in attacks even where the kernel cannot sandbox them (no unprivileged "
        "user namespaces, which both fences need): "
        "they can then read what you can; the report marks their rows",
    )


def _suite_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments ``run`` and ``audit`` share: the suite, where results go, how to run."""
    p.add_argument("suite")
    p.add_argument("--out", required=True, help="output folder (results.sqlite, artifacts)")
    p.add_argument("--data-root", default=None, help="datasets folder (else $FGLWB_DATA)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--keep-client-secrets",
        action="store_true",
        help="keep the clients' CKKS secret key in the snapshots (curious-client attacks "
        "offline); the folder then holds it",
    )
    _trust_argument(p)
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes: for shadow/reference models (serial executor) or for whole "
        "cells (process executor)",
    )
    p.add_argument(
        "--executor",
        choices=("serial", "process", "ray"),
        default="serial",
        help="serial: one cell at a time; process: --jobs cells at a time; ray: every cell a "
        "Ray task (pip install 'fgl-workbench[ray]')",
    )
    p.add_argument(
        "--address",
        default="local",
        help="with --executor ray: 'local' starts a private Ray instance with --jobs CPUs, "
        "'auto' joins the running cluster, or a Ray address",
    )
    _threads_argument(p)
    _device_argument(p)
    _mlflow_arguments(p)


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "epsilon":
        return cli_epsilon.run(args)
    if args.command == "run" and args.dry_run:
        from fgl_workbench.running.suite import load_suite

        return dry_run(load_suite(args.suite), Path(args.out))
    if args.command in ("run", "audit", "attack") and args.device is not None:
        from fgl_workbench.device import resolve_device

        resolve_device(args.device, "--device")  # named as typed, before anything is written
    tracking = _tracking(args) if args.command in ("run", "audit", "attack") else None
    if args.command in ("run", "audit"):
        from fgl_workbench.interface import api

        how = {"quiet": args.quiet, "jobs": args.jobs, "executor": args.executor}
        how |= {"address": args.address, "keep_client_secrets": args.keep_client_secrets}
        how |= {"device": args.device, "trust_plugins": args.trust_plugins}
        how |= {"threads": args.threads}
        if args.command == "run":
            summary = api.run_suite(args.suite, args.out, args.data_root, **how)
        else:
            summary = api.audit(args.suite, args.out, args.data_root, canaries=args.canaries, **how)
        print(
            f"{summary.cells_run} cell(s) run, {summary.cells_skipped} already done, "
            f"results in {summary.out_dir / 'results.sqlite'}"
        )
        if args.command == "audit":
            cli_epsilon.print_audits(api.privacy(args.out))
        path = api.build_report(args.out)
        print_measured(args.out)
        print(f"report: {path}")
        _log_mlflow(args, tracking)
        return 0
    if args.command == "attack":
        import json

        from fgl_workbench.interface import api

        if len(args.params) > len(args.attack):
            raise WorkbenchError("--params: more of them than --attack")
        attacks = []
        for i, name in enumerate(args.attack):
            text = args.params[i] if i < len(args.params) else "{}"
            try:
                params = json.loads(text)
            except json.JSONDecodeError as exc:
                raise WorkbenchError(f"--params {text!r}: not JSON ({exc})") from None
            attacks.append({"name": name, "params": params})
        done, missing = api.attack(
            args.out,
            attacks,
            args.data_root,
            jobs=args.jobs,
            device=args.device,
            trust_plugins=args.trust_plugins,
            threads=args.threads,
        )
        print(f"{done} cell(s) attacked, {missing} without a stored target")
        path = api.build_report(args.out)
        print_measured(args.out)
        print(f"report: {path}")
        _log_mlflow(args, tracking)
        return 0
    if args.command == "report":
        return _report(args)
    if args.command == "export":
        from fgl_workbench.registry import reading_untrusted

        with reading_untrusted(f"the results folder {args.out}"):
            return _export(args)
    return _list(args)


def _list(args: argparse.Namespace) -> int:
    """Each kind's components; with ``--import`` plug-in attacks are described by a fenced
    process, or unfenced where the user trusts them and the kernel has no fence."""
    from contextlib import nullcontext

    trusted = nullcontext()
    if args.imported:
        from fgl_workbench.attacks.plugins import trusting

        trusted = trusting(args.trust_plugins)
    with trusted:
        for kind in [args.kind] if args.kind else KINDS:
            print(f"{kind}:")
            for line in listing(kind, args.imported):
                print(f"  {line}")
    return 0


def _tracking(args: argparse.Namespace) -> Any:
    """The MLflow client ``--mlflow`` asks for, opened before anything runs (a missing
    mlflow or a store it cannot open is said at once), or None."""
    if args.mlflow is None:
        if args.mlflow_experiment is not None:
            raise WorkbenchError("--mlflow-experiment: needs --mlflow URI")
        return None
    if args.mlflow_experiment is not None and not args.mlflow_experiment.strip():
        raise WorkbenchError("--mlflow-experiment: expected a name")
    from fgl_workbench.reports.mlflow_log import connect

    return connect(args.mlflow)


def _log_mlflow(args: argparse.Namespace, tracking: Any) -> None:
    if tracking is None:
        return
    from fgl_workbench.reports.mlflow_log import log_results

    logged = log_results(args.out, tracking, args.mlflow_experiment)
    print(
        f"mlflow: {logged.created} run(s) created, {logged.updated} updated in experiment "
        f"'{logged.experiment}' at {args.mlflow}"
    )


def output_file(flag: str, path: str) -> None:
    """A file the command will write (missing folders above it are made): not a folder,
    and not below a file."""
    where = Path(path)
    if where.is_dir():
        raise WorkbenchError(f"{flag} {path}: expected a file to write, got a folder")
    below_file(flag, where.parent)


def output_folder(flag: str, path: str) -> None:
    """A folder the command will write into (made if missing): not a file, nor below one."""
    where = Path(path)
    if where.exists() and not where.is_dir():
        raise WorkbenchError(f"{flag} {path}: expected a folder, got a file")
    below_file(flag, where)


def below_file(flag: str, folder: Path) -> None:
    """Refuses a folder that cannot be made because a file stands where a folder above is."""
    for above in [folder, *folder.parents]:
        if above.exists():
            if not above.is_dir():
                raise WorkbenchError(f"{flag}: {above} is a file, not a folder")
            return


def _export(args: argparse.Namespace) -> int:
    from fgl_workbench.reports.frame import export

    if args.output is not None:
        output_file("--output", args.output)
    path = export(args.out, args.format, args.output)
    print(f"wrote {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    """Writes the report and prints its summary tables: everything read from the folders."""
    from fgl_workbench.interface.api import build_report
    from fgl_workbench.registry import reading_untrusted
    from fgl_workbench.storage.store import written

    if len(args.folders) > 1 and args.out is None:
        raise WorkbenchError(
            "report: several folders are compared in one report; name where it goes with --out"
        )
    out = args.out or args.folders[0]
    output_folder("--out" if args.out else "DIR", out)
    if args.tradeoff_png:
        output_file("--tradeoff-png", args.tradeoff_png)
    path = build_report(out, args.folders)
    with reading_untrusted("the results folder " + ", ".join(args.folders)):
        points = print_measured(args.folders)
    if args.tradeoff_png:
        from fgl_workbench.reports.tradeoff import tradeoff_figure

        figure = tradeoff_figure(points)
        if figure is None:
            raise WorkbenchError(
                "--tradeoff-png: no configuration has a privacy figure (ε or IB KL)"
            )
        png = Path(args.tradeoff_png)
        with written(png.parent, png.name) as f:  # whole or not at all, never through a link
            figure.savefig(f, format="png", dpi=110, bbox_inches="tight")
    print(f"report: {path}")
    return 0


def print_measured(out: str | Path | list[str]) -> list:
    """What a results folder (or several, compared) measured, as tables that fit the terminal
    (``summary.fitted``): utility per configuration (mean ± std over seeds), each attack's
    figures (TPRs and AUC with their 95 % intervals, the chance line where stated), and the
    privacy–utility points (returned)."""
    from fgl_workbench.reports.glossary import INDUCTIVE
    from fgl_workbench.reports.intervals import attack_tables
    from fgl_workbench.reports.report import load_results, plugin_notes
    from fgl_workbench.reports.summary import (
        across_seeds,
        fitted,
        format_interval,
        format_pm,
        seed_text,
        terminal_width,
    )
    from fgl_workbench.reports.tradeoff import privacy_axis, tradeoff_points, tradeoff_rows

    folders = [Path(f) for f in (out if isinstance(out, list) else [out])]
    found = load_results(folders, rocs=False)
    cells, attacks = found.cells, found.attacks
    utility = [
        [
            s.label,
            seed_text(s.seeds),
            f"{format_pm(s.accuracy)} {format_interval(s.accuracy_ci)}",
            format_pm(s.macro_f1),
            format_pm(s.auc, 1.0, 3),
        ]
        for s in across_seeds(cells)
    ]
    header = ["configuration", "seeds", "accuracy % [95% CI]", "macro-F1 %", "AUC"]
    tables = [("utility", header, utility), *attack_tables(cells, attacks)]
    points = tradeoff_points(cells, attacks)
    if privacy_axis(points) is not None:
        tables.append(("privacy-utility", *tradeoff_rows(points)))
    for line in fitted(tables, terminal_width()):
        print(line)
    if notes := plugin_notes(attacks):  # what a plug-in row's mark means, as in the report
        print(textwrap.fill(notes.strip(), terminal_width()))
    if any("-inductive/" in row[0] for row in utility):  # two kinds of test accuracy
        print(textwrap.fill(INDUCTIVE, terminal_width()))
    return points


def dry_run(suite, out: Path) -> int:
    """One line per cell: its label, what sets it apart from same-labelled cells, and whether
    the results folder already holds it; then the counts."""
    import json
    from collections import Counter

    from fgl_workbench.running.suite import expand
    from fgl_workbench.storage.store import STORE_FILE, ResultsStore

    cells = expand(suite)
    done: set[str] = set()
    if (out / STORE_FILE).is_file():
        store = ResultsStore(out, read_only=True)
        done = {c.cell_id for c in store.cells()}
        store.close()
    labels = Counter(c.label for c in cells)
    repeated = {label for label, count in labels.items() if count > 1}
    for c in cells:
        target = c.config()["target"]
        extra = ""
        if c.label in repeated:
            extra = "  " + json.dumps({k: v for k, v in target.items() if k != "name"})
        print(f"{'done' if c.cell_id in done else 'todo'}  {c.label}{extra}")
    todo = sum(c.cell_id not in done for c in cells)
    print(
        f"{len(cells)} cell(s) × {len(suite.attacks)} attack(s): {todo} to run, "
        f"{len(cells) - todo} already in {out}"
    )
    return 0
