"""``fgl-workbench epsilon``: ε for a mechanism configuration, before training anything.

Every numeric flag takes one value, a comma list (``1,2,4``) or an inclusive range
``start:stop:step``; more than one value anywhere makes a grid, written as a CSV with an
ε plot beside it. ``--grid FILE.yaml`` gives the same settings as a mapping."""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import math
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from fgl_workbench.errors import ConfigError

MECHANISMS = {
    "subsampled-gaussian": ("sigma", "q", "steps"),
    "gaussian": ("sigma", "sensitivity", "count"),
    "laplace": ("b", "sensitivity", "count"),
    "metric-gaussian": ("sigma0", "releases", "rho"),
}
NOISE = {
    "subsampled-gaussian": "sigma",
    "gaussian": "sigma",
    "laplace": "b",
    "metric-gaussian": "sigma0",
}
DEFAULTS = {"sensitivity": 1.0, "count": 1}
MAX_VALUES = 10_000  # per flag: a range is expanded into a list before anything is computed
MAX_GRID = 100_000  # settings in one grid
MAX_GRID_BYTES = 1 << 20  # a --grid file: a handful of settings, parsed whole before checks
INTEGER = {"steps", "count", "releases"}
PARTS = ("epsilons", "metric_epsilons", "audits")  # a cell's privacy figures, as api.privacy


def add_parser(sub: Any) -> None:
    p = sub.add_parser("epsilon", help="compute or calibrate ε for a DP mechanism")
    p.add_argument("--mechanism", choices=sorted(MECHANISMS))
    for name in ("sigma", "q", "steps", "sensitivity", "count", "b", "sigma0", "releases", "rho"):
        p.add_argument(f"--{name}", help="a value, a list a,b,c or a range start:stop:step")
    p.add_argument("--delta", help="default 1e-5")
    p.add_argument(
        "--target-epsilon",
        help="calibrate instead: the noise (or, with --solve "
        "steps, the largest step count) meeting this ε",
    )
    p.add_argument("--solve", choices=("noise", "steps"), default="noise")
    p.add_argument("--orders", choices=("extended", "opacus"), default="extended")
    p.add_argument("--conversion", choices=("improved", "classic"), default="improved")
    p.add_argument(
        "--no-refine",
        action="store_true",
        help="grid orders only (with --orders opacus: Opacus's exact ε)",
    )
    p.add_argument(
        "--pld",
        action="store_true",
        help="one configuration: also dp_accounting's PLD ε (tighter; its import alone takes "
        "about a second)",
    )
    p.add_argument("--grid", help="YAML file with the settings (mechanism, parameters, delta)")
    p.add_argument("--out", default="epsilon-grid.csv", help="grid mode: CSV path (plot beside)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--run",
        help="a results folder: each cell's ε per adversary and privacy unit (and its canary "
        "audit), instead of a mechanism",
    )


@dataclass(frozen=True)
class Row:
    params: dict[str, float]
    epsilon: float
    delta: float
    order: float
    solved: dict[str, float]
    warnings: list[str]
    pld: float | None = None  # dp_accounting's PLD ε (one configuration, with --pld: slower)


def run(args: argparse.Namespace) -> int:
    if args.run:
        return _print_run(args.run, args.json)
    settings = _settings(args)
    mechanism = settings.pop("mechanism", None)
    if mechanism not in MECHANISMS:
        raise ConfigError(
            f"--mechanism: expected one of {', '.join(sorted(MECHANISMS))} (got {mechanism!r})"
        )
    delta = _values("delta", settings.pop("delta", "1e-5"))
    if len(delta) != 1:
        raise ConfigError("--delta: give one value")
    target = settings.pop("target_epsilon", None)
    target_eps = _values("target-epsilon", target)[0] if target is not None else None
    needed = [n for n in MECHANISMS[mechanism] if not (target_eps and _solved(mechanism, n, args))]
    grids = {}
    for name in needed:
        raw = settings.get(name, DEFAULTS.get(name))
        if raw is None:
            raise ConfigError(f"--{name}: required for --mechanism {mechanism}")
        grids[name] = _values(name, raw)
    size = math.prod(len(v) for v in grids.values())
    if size > MAX_GRID:
        raise ConfigError(
            f"the grid has {size:,} settings; at most {MAX_GRID:,} (use fewer values)"
        )
    combos = [dict(zip(grids, vals, strict=True)) for vals in itertools.product(*grids.values())]
    rows = [_compute(mechanism, c, delta[0], target_eps, args) for c in combos]
    if len(rows) > 1:
        return _write_grid(rows, mechanism, args)
    _print(_with_pld(rows[0], mechanism) if args.pld else rows[0], mechanism, args)
    return 0


def _with_pld(row: Row, mechanism: str) -> Row:
    from fgl_workbench.accountants.pld import PLDUnavailable, pld_epsilon

    if not math.isfinite(row.epsilon):
        return row
    try:
        return replace(row, pld=pld_epsilon(_ledger(mechanism, row.params), row.delta))
    except PLDUnavailable as exc:  # metric-DP, or beyond dp_accounting's discretisation
        return replace(row, warnings=[*row.warnings, f"no PLD epsilon: {exc}"])


def _print_run(out: str, as_json: bool) -> int:
    """A results folder's ε per cell, adversary and unit (∞ where nothing is guaranteed)."""
    from fgl_workbench.interface.api import privacy
    from fgl_workbench.storage.store import metric_figure

    figures = privacy(out)
    if as_json:
        finite = {
            cell_id: {
                "label": cell["label"],
                **{part: [_json_row(r) for r in cell[part]] for part in PARTS},
            }
            for cell_id, cell in figures.items()
        }
        print(json.dumps(finite, indent=2))
        return 0
    for cell_id, cell in figures.items():
        print(f"{cell['label']}  [cell {cell_id}]")
        if not cell["epsilons"] and not cell["metric_epsilons"]:
            print("  no privacy event: no ε against anyone")
        for e in cell["epsilons"]:
            note = f"  ({e['note']})" if e["note"] else ""
            pld = "" if e.get("epsilon_pld") is None else f" (PLD {_fmt(e['epsilon_pld'])})"
            print(
                f"  against {e['adversary']:<8} {e['unit']:<7} ε = {_fmt(e['epsilon'])} RDP"
                f"{pld} at δ = {e['delta']:g}{note}"
            )
        for e in cell["metric_epsilons"]:
            print(
                f"  against {e['adversary']:<8} {e['unit']:<7} metric-DP {metric_figure(e)} "
                f"at δ = {e['delta']:g}  ({e['note']})"
            )
    print_audits(figures)
    return 0


def print_audits(privacy: dict[str, dict[str, Any]]) -> None:
    """One line per audited claim: lower bounds and ceilings vs claimed ε, and whether it
    holds."""
    from fgl_workbench.audits.stored import (  # torch: not for `epsilon` alone
        bound_text,
        verdict_text,
    )

    for cell_id, figures in privacy.items():
        for a in figures["audits"]:
            print(
                f"{figures['label']} [cell {cell_id}]  {a['defense']} vs {a['adversaries']} "
                f"({a['unit']}): {bound_text(a)} at {a['confidence']:.1%}, "
                f"{a['correct']}/{a['guesses']} on {a['canaries']} canaries, claimed "
                f"{a['claimed']:.3f}: {verdict_text(a)}"
            )


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    """∞ as the string "inf": JSON has no infinity."""
    return {k: _fmt(v) if isinstance(v, float) and math.isinf(v) else v for k, v in row.items()}


def _solved(mechanism: str, name: str, args: argparse.Namespace) -> bool:
    return name == ("steps" if args.solve == "steps" else NOISE[mechanism])


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.grid:
        path = Path(args.grid)
        if not path.is_file():
            raise ConfigError(f"--grid: file not found: {path}")
        if path.stat().st_size > MAX_GRID_BYTES:
            raise ConfigError(f"--grid: {path} is over the cap of {MAX_GRID_BYTES} bytes")
        try:
            loaded = yaml.safe_load(path.read_bytes())
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" (line {where.line + 1})" if where is not None else ""
            raise ConfigError(f"--grid: {path} is not valid YAML{at}") from None
        except ValueError as exc:  # an integer past Python's digit limit
            raise ConfigError(f"--grid: {path} is not a YAML text ({exc})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"--grid: {path} must hold a mapping of settings")
        known = {
            "mechanism",
            "delta",
            "target_epsilon",
            *DEFAULTS,
            *NOISE.values(),
            *(n for names in MECHANISMS.values() for n in names),
        }
        unknown = set(loaded) - known
        if unknown:
            named = sorted(map(str, unknown))  # YAML keys may be numbers, dates, None
            raise ConfigError(f"--grid: unknown keys {named}; valid: {sorted(known)}")
        out.update({k: _yaml_value(k, v) for k, v in loaded.items()})
    for name in (
        "mechanism",
        "sigma",
        "q",
        "steps",
        "sensitivity",
        "count",
        "b",
        "sigma0",
        "releases",
        "rho",
        "delta",
        "target_epsilon",
    ):
        value = getattr(args, name)
        if value is not None:
            out[name] = value  # flags override the YAML
    return out


def _yaml_value(name: str, v: Any) -> Any:
    """A setting from the grid file as a flag would give it: a flat list joined by commas
    (a nested list, an alias bomb among them, is refused, not written out)."""
    if isinstance(v, list):
        if len(v) > MAX_VALUES or any(isinstance(x, list | dict) for x in v):
            raise ConfigError(
                f"--grid: {name}: expected a number, a range or a flat list of at most "
                f"{MAX_VALUES:,} numbers"
            )
        return ",".join(map(str, v))
    if isinstance(v, dict):
        raise ConfigError(f"--grid: {name}: expected a number, a range or a list, got a mapping")
    return v


def _values(name: str, raw: Any) -> list[float]:
    """Parse and validate one flag: a number, a comma list or start:stop:step."""
    text = str(raw).strip()
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if not all(map(math.isfinite, (start, stop, step))) or step <= 0 or stop < start:
                raise ValueError
            if (stop - start) / step > MAX_VALUES:
                raise ConfigError(
                    f"--{name}: the range {text} has more than {MAX_VALUES:,} values; at most "
                    f"{MAX_VALUES:,} per flag (widen the step)"
                )
            n = int(math.floor((stop - start) / step + 1e-9)) + 1
            values = [round(start + i * step, 12) for i in range(n)]
        else:
            values = [float(x) for x in text.split(",")]
            if len(values) > MAX_VALUES:
                raise ConfigError(f"--{name}: {len(values):,} values; at most {MAX_VALUES:,}")
    except ValueError:
        raise ConfigError(
            f"--{name}: expected a number, a list a,b,c or a range start:stop:step (got {text!r})"
        ) from None
    for v in values:
        _check(name, v)
    return values


def _check(name: str, v: float) -> None:
    if not math.isfinite(v):
        raise ConfigError(f"--{name}: expected a finite number (got {v})")
    if name == "q" and not 0 < v <= 1:
        raise ConfigError(f"--q: expected a sampling rate in (0, 1] (got {v:g})")
    elif name == "delta" and not 0 < v < 1:
        raise ConfigError(f"--delta: expected a number in (0, 1) (got {v:g})")
    elif name in INTEGER and (v < 0 or v != int(v)):
        raise ConfigError(f"--{name}: expected a whole number >= 0 (got {v:g})")
    elif name not in INTEGER and name not in ("q", "delta") and v <= 0:
        raise ConfigError(f"--{name}: expected a number > 0 (got {v:g})")


def _ledger(mechanism: str, p: dict[str, float]):
    from fgl_workbench.accountants import (
        Gaussian,
        Laplace,
        MetricGaussian,
        PrivacyLedger,
        SubsampledGaussian,
    )

    if mechanism == "subsampled-gaussian":
        event = SubsampledGaussian(p["q"], p["sigma"], int(p["steps"]))
    elif mechanism == "gaussian":
        event = Gaussian(p["sigma"], p["sensitivity"], int(p["count"]))
    elif mechanism == "laplace":
        event = Laplace(p["b"], p["sensitivity"], int(p["count"]))
    else:
        event = MetricGaussian(p["sigma0"], int(p["releases"]))
    return PrivacyLedger((event,))


def _compute(
    mechanism: str,
    p: dict[str, float],
    delta: float,
    target: float | None,
    args: argparse.Namespace,
) -> Row:
    from fgl_workbench.accountants import calibrate, epsilon, max_steps

    p = {k: int(v) if k in INTEGER else v for k, v in p.items()}
    kw = {
        "orders": args.orders,
        "conversion_kind": args.conversion,
        "rho": p.get("rho"),
        "refine": not args.no_refine,
    }
    solved: dict[str, float] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if target is not None and args.solve == "steps":
                if mechanism != "subsampled-gaussian":
                    raise ConfigError("--solve steps: only for --mechanism subsampled-gaussian")
                steps = max_steps(
                    target,
                    delta,
                    p["q"],
                    p["sigma"],
                    orders=args.orders,
                    conversion_kind=args.conversion,
                    refine=not args.no_refine,
                )
                p = {**p, "steps": steps}
                solved = {"steps": p["steps"]}
            elif target is not None:
                noise = NOISE[mechanism]
                x = calibrate(lambda v: _ledger(mechanism, {**p, noise: v}), target, delta, **kw)
                p = {**p, noise: x}
                solved = {noise: x}
            report = epsilon(_ledger(mechanism, p), delta, **kw)
        except (ValueError, ArithmeticError) as exc:  # a numerical failure: said, not raised
            raise ConfigError(str(exc)) from None
    notes = sorted({str(w.message) for w in caught})
    return Row(p, report.epsilon, delta, report.order, solved, notes)


def _print(row: Row, mechanism: str, args: argparse.Namespace) -> None:
    if args.json:
        print(
            json.dumps(
                {
                    "mechanism": mechanism,
                    **row.params,
                    "epsilon": row.epsilon,
                    "delta": row.delta,
                    "order": row.order,
                    "orders": args.orders,
                    "conversion": args.conversion,
                    "solved": row.solved,
                    "warnings": row.warnings,
                    "epsilon_pld": row.pld,
                }
            )
        )
        return
    for w in row.warnings:
        print(f"warning: {w}")
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in row.params.items())
    if row.solved:
        print("calibrated: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in row.solved.items()))
    print(
        f"{mechanism}({params}): epsilon = {_fmt(row.epsilon)} at delta = {row.delta:g} "
        f"(best order {row.order:.4g}; {args.orders} orders, {args.conversion} conversion)"
    )
    if row.pld is not None:
        print(
            f"  PLD accountant (dp_accounting, pessimistic): epsilon = {_fmt(row.pld)} at the "
            "same delta"
        )


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.6g}"


def _write_grid(rows: list[Row], mechanism: str, args: argparse.Namespace) -> int:
    from fgl_workbench.storage.store import written  # here: `epsilon` alone imports no torch

    out = Path(args.out)
    names = list(rows[0].params)
    # whole or not at all, never through a link (as every output: ``storage.store.written``)
    with written(out.parent, out.name) as raw:
        f = io.TextIOWrapper(raw, newline="")
        w = csv.writer(f)
        w.writerow([*names, "epsilon", "delta", "order", "warnings"])
        for r in rows:
            w.writerow(
                [*(r.params[n] for n in names), r.epsilon, r.delta, r.order, " | ".join(r.warnings)]
            )
        f.flush()
        f.detach()  # ``written`` closes the file it opened
    varying = [n for n in names if len({r.params[n] for r in rows}) > 1]
    plot = out.with_suffix(".png")
    _plot(rows, varying, mechanism, plot)
    if args.json:
        print(json.dumps({"csv": str(out), "plot": str(plot), "rows": len(rows)}))
    else:
        print(f"{len(rows)} configurations: {out}  plot: {plot}")
    return 0


def _plot(rows: list[Row], varying: list[str], mechanism: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_name = varying[0] if varying else next(iter(rows[0].params))
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        key = tuple((n, r.params[n]) for n in varying[1:])
        groups.setdefault(key, []).append(r)
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, members in groups.items():
        members.sort(key=lambda r: r.params[x_name])
        label = ", ".join(f"{n}={_fmt(v)}" for n, v in key) or None
        ax.plot(
            [r.params[x_name] for r in members],
            [r.epsilon for r in members],
            marker=".",
            label=label,
        )
    ax.set(
        xlabel=x_name, ylabel="ε", yscale="log", title=f"{mechanism}: ε at δ = {rows[0].delta:g}"
    )
    if len(groups) > 1:
        ax.legend(fontsize=7)
    fig.tight_layout()
    from fgl_workbench.storage.store import written

    with written(path.parent, path.name) as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
