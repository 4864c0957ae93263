"""Summaries across seeds: cells that differ only in their seed are one configuration, shown
as mean ± sample standard deviation over the seeds."""

from __future__ import annotations

import json
import math
import re
import shutil
import textwrap
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fgl_workbench.storage.store import AttackRow, CellRow

# each attack family's columns: (metric key, header)
FAMILY_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "membership": (
        ("auc", "AUC [95% CI]"),
        ("tpr@0.01", "TPR@1%"),
        ("tpr@0.001", "TPR@0.1%"),
        ("epsilon_lb", "ε lb"),
        ("client_auc_mean", "client AUC"),
    ),
    "link": (
        ("auc", "AUC [95% CI]"),
        ("auc_intra", "AUC intra-client"),
        ("auc_uniform", "AUC intra, He et al. negatives"),
        ("auc_cut", "AUC cut"),
        ("average_precision", "AP"),
        ("epsilon_lb", "ε lb"),
    ),
    "attribute": (
        ("accuracy", "accuracy"),
        ("accuracy_baseline", "prior accuracy"),
        ("macro_f1", "macro-F1"),
        ("auc", "AUC"),
    ),
    "record-source": (
        ("accuracy", "accuracy"),
        ("accuracy_baseline", "largest client"),
        ("chance_matched", "blind, same guesses"),
        ("holdout_accuracy", "held-out records"),
        ("auc", "AUC one-vs-rest"),
    ),
    "distribution": (
        ("tv_mean", "TV"),
        ("tv_baseline", "prior TV"),
        ("dominant_accuracy", "dominant class"),
        ("dominant_baseline", "prior dominant"),
    ),
    "client-data": (
        ("cosine", "feature cosine"),
        ("cosine_baseline", "prior cosine"),
        ("feature_auc", "feature AUC"),
        ("feature_auc_baseline", "prior AUC"),
        ("label_accuracy", "label accuracy"),
        ("label_accuracy_baseline", "prior label acc."),
        ("label_set_accuracy", "label multiset"),
        ("cosine_singleton", "cosine, one-node gradients"),
    ),
    "feature": (
        ("cosine", "feature cosine"),
        ("cosine_baseline", "prior cosine"),
        ("feature_auc", "feature AUC"),
        ("feature_auc_baseline", "prior AUC"),
        ("mse", "MSE"),
        ("mse_nearest_1pct", "MSE to nearest 1%"),
    ),
    "audit": (
        ("auc", "AUC"),
        ("epsilon_held_out", "ε lb (held out)"),
        ("epsilon_accountant", "ε(ρ) accountant"),
        ("bound_holds", "bound holds"),
        ("rho", "ρ"),
    ),
}
ATTACK_METRICS = tuple(dict.fromkeys(k for cols in FAMILY_COLUMNS.values() for k, _ in cols))
# families whose rows end with how their AUC reads (``reading``)
READ_BY_AUC = ("membership", "link")
CHANCE_MARGIN = 0.05  # an interval within 0.5 ± this reads as "at chance"


@dataclass(frozen=True)
class SeedSummary:
    label: str
    seeds: list[int]
    accuracy: tuple[float, float]  # mean, std
    macro_f1: tuple[float, float]
    auc: tuple[float, float]
    accuracy_ci: tuple[float, float]  # 95 %: Student-t over seeds, or Wilson on one seed


NO_CHANCE_LINE = (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class AttackSummary:
    cell: str  # the configuration's label (seed dropped)
    attack: str
    seeds: int
    metrics: dict[str, tuple[float, float]]  # mean, std over the seeds that reported it
    status: str  # "ok", or the status of the first seed when none succeeded
    # 95 % interval of the AUC: Student-t over seeds, or one seed's own; NaN when neither
    auc_interval: tuple[float, float] = (float("nan"), float("nan"))
    # the challenge's chance line: its AUC and 95 % interval (0.5 where none is stated)
    chance: tuple[float, float, float] = NO_CHANCE_LINE


def across_seeds(cells: list[CellRow]) -> list[SeedSummary]:
    out = [
        SeedSummary(
            label=label,
            seeds=[c.config["seed"] for c in group],
            accuracy=_mean_std([c.utility["accuracy"] for c in group]),
            macro_f1=_mean_std([c.utility["macro_f1"] for c in group]),
            auc=_mean_std([c.utility.get("auc", float("nan")) for c in group]),
            accuracy_ci=accuracy_interval(group),
        )
        for label, group in configurations(cells)
    ]
    return sorted(out, key=lambda s: natural_key(s.label))


def attacks_across_seeds(cells: list[CellRow], attacks: list[AttackRow]) -> list[AttackSummary]:
    """One row per configuration × attack, its metrics as mean ± std over seeds."""
    label = {c.cell_id: lab for lab, group in configurations(cells) for c in group}
    rows: dict[tuple[str, str], list[AttackRow]] = defaultdict(list)
    for a in attacks:
        if a.cell_id in label:
            rows[(label[a.cell_id], a.label)].append(a)
    out = []
    for (cell, attack), group in rows.items():
        ok = [a.metrics for a in group if a.status == "ok" and a.metrics]
        metrics = {
            m: _mean_std([r[m] for r in ok if r.get(m) is not None])
            for m in ATTACK_METRICS
            if any(r.get(m) is not None for r in ok)
        }
        status = "ok" if ok else group[0].status
        interval, chance = auc_interval(ok), chance_of([m for m in ok if "auc" in m])
        out.append(AttackSummary(cell, attack, len(group), metrics, status, interval, chance))
    return sorted(out, key=lambda r: (natural_key(r.cell), r.attack))


def seed_interval(rows: list[dict], key: str) -> tuple[float, float] | None:
    """The 95 % interval of ``key``'s mean over seeds: Student-t over the seeds, never
    narrower than the seeds' own intervals (``key_ci_low``/``key_ci_high``) on average, or
    one seed's own; None where no seed states one (a rate the negatives cannot resolve)."""
    own = [
        (float(m[f"{key}_ci_low"]), float(m[f"{key}_ci_high"]))
        for m in rows
        if m.get(key) is not None and m.get(f"{key}_ci_low") is not None
    ]
    values = [float(m[key]) for m in rows if m.get(key) is not None]
    if not own:
        return None
    if len(values) == 1:
        return own[0]
    low, high = mean_interval(values)
    half = max((high - low) / 2, float(np.mean([(h - lo) / 2 for lo, h in own])))
    mean = float(np.mean(values))
    return max(mean - half, 0.0), min(mean + half, 1.0)  # a rate lies in [0, 1]


def auc_interval(metrics: list[dict]) -> tuple[float, float]:
    """The 95 % interval of a row's AUC (``seed_interval``); where no seed states its own,
    Student-t over the seeds alone, NaN with one seed."""
    found = seed_interval(metrics, "auc")
    if found is not None:
        return found
    low, high = mean_interval([m["auc"] for m in metrics if m.get("auc") is not None])
    return (max(low, 0.0), min(high, 1.0)) if np.isfinite(low) else (low, high)


def reading(
    interval: tuple[float, float], chance: tuple[float, float, float] = NO_CHANCE_LINE
) -> str:
    """How an AUC row may be read against its challenge's chance line ``chance`` (its AUC
    and 95 % interval: what non-private facts alone give; 0.5 where none is stated). "leaks"
    (or "below chance") when the row's 95 % interval lies wholly above (below) the chance
    line's; "at chance" when it holds the chance AUC and stays within it ± 0.05; otherwise
    "inconclusive": a row like 0.52 ± 0.15 over three seeds is as consistent with a real leak
    as with none, and must not be read as "leaks little"."""
    low, high = interval
    line, line_low, line_high = chance
    if np.isnan(low):
        return "n/a"
    if low > line_high:
        return "leaks"
    if high < line_low:
        return "below chance"
    if high - line <= CHANCE_MARGIN and line - low <= CHANCE_MARGIN:
        return "at chance"
    return "inconclusive"


def chance_of(rows: list[dict]) -> tuple[float, float, float]:
    """The chance line of seeds' ``rows`` (the mean of their chance AUCs and of their
    intervals' ends), or 0.5 where some seed's challenge states none."""
    keys = ("chance_auc", "chance_auc_ci_low", "chance_auc_ci_high")
    if not rows or any(r.get(k) is None for r in rows for k in keys):
        return NO_CHANCE_LINE
    line, low, high = (float(np.mean([r[k] for r in rows])) for k in keys)
    return (line, low, high)


def built_in_family(name: str) -> str | None:
    """A built-in attack's family; None for a plug-in (reports never describe one)."""
    from fgl_workbench.attacks import ATTACKS
    from fgl_workbench.registry import BUILT_IN

    if not ATTACKS.known(name) or ATTACKS.origin(name) != BUILT_IN:
        return None
    return ATTACKS.get(name).family


def family_of(attack_label: str) -> str:
    """The family of an attack, from its label (``mia-threshold(hops=2)``, a plug-in's with
    its mark after a space)."""
    name = attack_label.split("(", 1)[0].split(" ", 1)[0]
    return built_in_family(name) or "membership"


def family_rows(
    rows: list[AttackSummary],
) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per attack family present: its name, its column headers and one row of mean ± std
    per configuration × attack; "n/a" where a metric cannot be resolved (TPR at an FPR below
    1/non-members) or does not apply (per-client AUC outside the server view). Membership and
    link rows end with how their AUC reads (``reading``)."""
    out = []
    for family, columns in FAMILY_COLUMNS.items():
        mine = [r for r in rows if family_of(r.attack) == family]
        if not mine:
            continue
        read = family in READ_BY_AUC
        header = ["configuration", "attack", "seeds"] + [h for _, h in columns]
        header += ["reading"] if read else []
        body = []
        for r in mine:
            missing = "n/a" if r.status == "ok" else r.status.replace("_", " ")
            body.append(
                [r.cell, r.attack, str(r.seeds)]
                + [_with_interval(r, k) if k in r.metrics else missing for k, _ in columns]
                + (
                    [reading(r.auc_interval, r.chance) if r.status == "ok" else missing]
                    if read
                    else []
                )
            )
        out.append((family, header, body))
    return out


def _with_interval(r: AttackSummary, metric: str) -> str:
    """A metric's mean ± std over seeds; the AUC with its 95 % interval (over seeds, or one
    seed's bootstrap) instead of a spread, which one seed does not have."""
    if metric != "auc" or np.isnan(r.auc_interval[0]):
        return format_pm(r.metrics[metric], 1.0, 3)
    low, high = r.auc_interval
    return f"{r.metrics[metric][0]:.3f} [{low:.3f}, {high:.3f}]"


TableRows = tuple[str, list[str], list[list[str]]]  # (title, header, rows)
# the columns that name a row: repeated in every part of a split table, keyed in a legend
NAME_COLUMNS = {"configuration": "C", "attack": "A"}
TERMINAL_FALLBACK = (100, 24)  # columns, lines: where no terminal says its size
NARROWEST = 60  # never split tables to fit fewer columns than this


def terminal_width() -> int:
    """The columns of the terminal (``$COLUMNS`` first; 100 where output is not one)."""
    return max(shutil.get_terminal_size(TERMINAL_FALLBACK).columns, NARROWEST)


def fitted(tables: list[TableRows], width: int) -> list[str]:
    """Tables as aligned markdown no wider than ``width``. Where one would be wider,
    configurations and attacks are named by short keys (C1, A1; in headers too) with a
    legend below, and a table still too wide is split into parts that each repeat the
    naming columns: every figure is printed, none cut."""
    if all(_width(header, rows) <= width for _, header, rows in tables):
        return [line for t in tables for line in _aligned(*t)]
    keys = _legend(tables)
    lines = []
    for title, header, rows in tables:
        names = [i for i, h in enumerate(header) if h in NAME_COLUMNS]
        header = [_keyed(h, keys) for h in header]
        rows = [[keys.get(v, v) if i in names else v for i, v in enumerate(r)] for r in rows]
        for part, columns in enumerate(_parts(header, rows, names, width)):
            name = title if part == 0 else f"{title} (continued)"
            lines += _aligned(
                name, [header[i] for i in columns], [[r[i] for i in columns] for r in rows]
            )
    lines.append("")
    for name, key in keys.items():
        lines += textwrap.wrap(f"{key}  {name}", width, subsequent_indent=" " * (len(key) + 2))
    return lines


def _legend(tables: list[TableRows]) -> dict[str, str]:
    """Each configuration and attack named in the tables, by its short key."""
    keys: dict[str, str] = {}
    for column, prefix in NAME_COLUMNS.items():
        named = {
            r[header.index(column)]: None
            for _, header, rows in tables
            if column in header
            for r in rows
        }
        keys |= {name: f"{prefix}{i}" for i, name in enumerate(sorted(named, key=natural_key), 1)}
    return keys


def _keyed(header: str, keys: dict[str, str]) -> str:
    """A header naming an attack ("mia-rmia(num_references=4) auc") by its key."""
    for name in sorted(keys, key=len, reverse=True):  # the longest name that fits
        if header.startswith(name + " "):
            return keys[name] + header[len(name) :]
    return header


def _parts(
    header: list[str], rows: list[list[str]], names: list[int], width: int
) -> list[list[int]]:
    """The columns of each part: the naming columns, then as many others as fit (one at least)."""
    sizes = [n + 3 for n in _sizes(header, rows)]
    fixed = 1 + sum(sizes[i] for i in names)
    parts: list[list[int]] = []
    used = width
    for i in (i for i in range(len(header)) if i not in names):
        if used + sizes[i] > width:
            parts.append(list(names))
            used = fixed
        parts[-1].append(i)
        used += sizes[i]
    return parts or [list(names)]


def _width(header: list[str], rows: list[list[str]]) -> int:
    """Characters in each line of ``_aligned``'s table."""
    return 1 + sum(n + 3 for n in _sizes(header, rows))


def _sizes(header: list[str], rows: list[list[str]]) -> list[int]:
    return [max(len(v) for v in [h, *(r[i] for r in rows)]) for i, h in enumerate(header)]


def _aligned(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    """One markdown table, its columns padded: names left, figures right."""
    sizes = _sizes(header, rows)
    left = [i == 0 or h in NAME_COLUMNS for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [
            c.ljust(n) if lt else c.rjust(n) for c, n, lt in zip(cells, sizes, left, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (n + 2) if lt else "-" * (n + 1) + ":" for n, lt in zip(sizes, left, strict=True)]
    return [f"\n{title}:", line(header), "|" + "|".join(rule) + "|", *map(line, rows)]


def seed_text(seeds: list[int]) -> str:
    """Which seeds, never read as how many: "seed 0", "seeds 0–2", "seeds 0, 3, 7"."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"seeds {ordered[0]}–{ordered[-1]}"
    return "seeds " + ", ".join(map(str, ordered))


def configurations(cells: list[CellRow]) -> list[tuple[str, list[CellRow]]]:
    """Cells grouped by configuration (all but the seed), each group with its label. Where
    configurations share a label (a sweep over parameters), the settings that tell them apart
    are appended by their last name where that is unambiguous, e.g.
    ``Cora/louvain-10/fedavg+dp-fedavg [noise_multiplier=0.5]``, else by their full path,
    e.g. ``PROTEINS/iid-3/fedavg [target.params.lr=0.01]`` when another ``lr`` differs too."""
    groups: dict[str, list[CellRow]] = defaultdict(list)
    for c in cells:
        key = json.dumps({k: v for k, v in c.config.items() if k != "seed"}, sort_keys=True)
        groups[key].append(c)
    members = [sorted(g, key=lambda c: c.config["seed"]) for g in groups.values()]
    labels = [g[0].label.rsplit("/seed", 1)[0] for g in members]
    flat = [_flatten({k: v for k, v in g[0].config.items() if k != "seed"}) for g in members]
    out = []
    for i, label in enumerate(labels):
        twins = [j for j, other in enumerate(labels) if other == label]
        if len(twins) > 1:
            keys = sorted({k for j in twins for k in flat[j]})
            differ = [k for k in keys if len({repr(flat[j].get(k)) for j in twins}) > 1]
            short = _short_names(differ)
            label = (
                f"{label} ["
                + ", ".join(f"{short[k]}={flat[i].get(k, 'default')}" for k in differ)
                + "]"
            )
        out.append((label, members[i]))
    return out


def natural_key(label: str) -> list:
    """Sort key that orders the numbers inside labels by value: σ = 3 before σ = 10."""
    parts = re.split(r"(\d+(?:\.\d+)?)", label)
    return [(0, float(p), "") if i % 2 else (1, 0.0, p) for i, p in enumerate(parts)]


def cell_labels(cells: list[CellRow]) -> dict[str, str]:
    """Each cell's label with the settings that set it apart from its sweep twins, e.g.
    ``Cora/louvain-10/fedavg+dp-fedavg/seed0 [noise_multiplier=0.5]``."""
    out = {}
    for label, group in configurations(cells):
        base, _, settings = label.partition(" [")
        for c in group:
            seed = f"{base}/seed{c.config['seed']}"
            out[c.cell_id] = f"{seed} [{settings}" if settings else seed
    return out


def _short_names(paths: list[str]) -> dict[str, str]:
    """Each dotted path by its last name, unless two paths share it."""
    last = [p.rsplit(".", 1)[-1] for p in paths]
    return {p: n if last.count(n) == 1 else p for p, n in zip(paths, last, strict=True)}


def _flatten(d: dict | list, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    items = d.items() if isinstance(d, dict) else ((f"[{i}]", v) for i, v in enumerate(d))
    for k, v in items:
        key = f"{prefix}{k}" if not prefix or k.startswith("[") else f"{prefix}.{k}"
        if isinstance(v, dict | list) and v:
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def mean_interval(xs: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t confidence interval of the mean over seeds (seeds are few, so not normal)."""
    a = np.asarray(xs, dtype=float)
    if a.size < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + level / 2, a.size - 1) * a.std(ddof=1) / np.sqrt(a.size)
    return float(a.mean() - half), float(a.mean() + half)


def accuracy_interval(group: list[CellRow]) -> tuple[float, float]:
    """95 % interval of a configuration's accuracy: Student-t over its seeds, or with one
    seed the Wilson interval over that cell's test records."""
    if len(group) > 1:
        return mean_interval([c.utility["accuracy"] for c in group])
    return wilson(group[0].utility["accuracy"], sum(int(p["num_test"]) for p in group[0].partition))


def wilson(p: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` over ``n`` trials."""
    if n <= 0:
        return float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def format_interval(interval: tuple[float, float], scale: float = 100.0, digits: int = 1) -> str:
    if np.isnan(interval[0]):
        return "n/a"
    return f"[{interval[0] * scale:.{digits}f}, {interval[1] * scale:.{digits}f}]"


def _mean_std(xs: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation; the deviation of one value is unknown (NaN), not 0."""
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else float("nan")


def format_pm(mean_std: tuple[float, float], scale: float = 100.0, digits: int = 1) -> str:
    """ "mean ± std", or the mean alone where one seed leaves the spread unknown."""
    if np.isnan(mean_std[0]):
        return "n/a"
    if np.isnan(mean_std[1]):
        return f"{mean_std[0] * scale:.{digits}f}"
    return f"{mean_std[0] * scale:.{digits}f} ± {mean_std[1] * scale:.{digits}f}"
