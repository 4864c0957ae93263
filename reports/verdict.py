"""The report's first word: one paragraph per configuration saying how its attacks read (leak,
at chance, inconclusive: the words of the tables' reading column), the strongest adversary at
low FPR, the ε against each party and what it covers, and the utility cost, with warnings
where a reader could be misled (utility at the majority-class rate, a vacuous ε, a ROC band
above its DP ceiling, a failed canary audit) and notes on inconclusive rows.

The auditor table (``auditor_rows``) gives the same per configuration in one row each, the
undefended baselines first. Everything is read from the summaries the report's tables show
(``attacks_across_seeds``, the cells' ε rows, the ROC curves and their bands), so the verdict
cannot say what the numbers below it do not."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fgl_workbench.audits.stored import holds
from fgl_workbench.reports.intervals import chance_line, metrics_by_row, seed_interval
from fgl_workbench.reports.plots import RocCurve, fpr_span
from fgl_workbench.reports.summary import (
    READ_BY_AUC,
    AttackSummary,
    accuracy_interval,
    attacks_across_seeds,
    configurations,
    family_of,
    reading,
    seed_text,
)
from fgl_workbench.storage.store import AttackRow, CellRow

# ε above this allows an attack a TPR of 1 at any FPR ≥ e^−ε ≈ 4.5e-5: no meaningful bound
VACUOUS_EPSILON = 10.0
Kind = Literal["ok", "warn", "info"]


@dataclass(frozen=True)
class Strongest:
    """The strongest attack where auditors look first, its figures as the verdict writes
    them: the AUC with its 95 % interval, the TPR at 1 % FPR with its own (None where no row
    resolves 1 % FPR), the chance line where the challenge states one."""

    attack: str
    adversary: str
    auc: str
    tpr: str | None
    chance: str | None


@dataclass(frozen=True)
class Verdict:
    """``kind``: "warn" when an attack leaks or a warning stands, "ok" when every attack on
    a DP configuration reads at chance and nothing is to warn of, else "info"
    (an inconclusive row is no evidence of safety). ``notes`` qualify without warning (rows
    too noisy to read either way). The rest is what the auditor table shows of it."""

    configuration: str
    kind: Kind
    text: str
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()
    defended: bool = False
    epsilons: dict[tuple[str, str], float] = field(default_factory=dict)
    utility: Utility | None = None
    twin: Utility | None = None  # the undefended configuration's, for a defended one
    strongest: Strongest | None = None
    readings: tuple[str, ...] = ()  # each membership and link attack's


@dataclass(frozen=True)
class Utility:
    accuracy: float
    interval: tuple[float, float]  # 95 %: Student-t over seeds, or Wilson on one seed's records
    majority: float  # the share of the most common class among the clients' records


def verdicts(
    cells: list[CellRow],
    attacks: list[AttackRow],
    delta: float,
    curves: Sequence[RocCurve] = (),
) -> list[Verdict]:
    """One verdict per configuration, the undefended ones first (the baselines the others
    are read against), else in the report's order; ``curves`` (the report's ROC curves) let
    it warn where an attack's 95 % band lies wholly above its DP ceiling."""
    summary = attacks_across_seeds(cells, attacks)
    raw = metrics_by_row(cells, attacks)
    adversary = {a.label: adversary_of(a.params) for a in attacks}
    groups = configurations(cells)
    twins = {label: _twin(group, groups) for label, group in groups}
    groups = sorted(groups, key=lambda g: bool(g[1][0].config["target"].get("defenses")))
    return [
        _verdict(
            label,
            group,
            [r for r in summary if r.cell == label],
            {r.attack: raw.get((label, r.attack), []) for r in summary if r.cell == label},
            adversary,
            utility(group),
            None if twins[label] is None else utility(twins[label]),
            delta,
            [c for c in curves if c.configuration == label and c.above_ceiling().size],
        )
        for label, group in groups
    ]


AUDITOR_HEADER = [
    "configuration",
    "ε per adversary",
    "accuracy [95% CI]",
    "utility change",
    "strongest attack (adversary)",
    "TPR at 1% FPR [95% CI]",
    "AUC [95% CI]",
    "reading",
]


def auditor_rows(found: list[Verdict]) -> list[list[str]]:
    """The verdicts as the auditor table's rows (``AUDITOR_HEADER``): one per configuration,
    the undefended baselines first, each figure with its 95 % interval; the reading counts
    the configuration's membership and link attacks by how they read."""
    rows = []
    for v in found:
        eps = "; ".join(epsilon_phrases(v.epsilons)) if v.epsilons else "∞: no DP mechanism ran"
        if v.twin is not None and v.utility is not None:
            change = f"{change_text(v.utility, v.twin)} (undefended {v.twin.accuracy:.1%})"
        else:
            change = "no undefended twin" if v.defended else "baseline"
        top = v.strongest
        attack = tpr = auc = "none scored"
        if top is not None:
            attack, tpr = f"{top.attack} ({top.adversary})", top.tpr or "not resolved"
            auc = top.auc + ("" if top.chance is None else f"; chance {top.chance}")
        counts = Counter(v.readings)
        read = ", ".join(f"{counts[w]} {w}" for w, *_ in READING_WORDS if counts[w]) or "n/a"
        accuracy = "n/a" if v.utility is None else accuracy_text(v.utility)
        rows.append([v.configuration, eps, accuracy, change, attack, tpr, auc, read])
    return rows


def adversary_of(params: dict) -> str:
    """Whom an attack plays, from its parameters: the server, a client, or (by default) a
    querier; reading the embeddings exchanged through the server is the server."""
    if params.get("source") == "exchanged":
        return "server"
    return {"client": "clients", "server": "server"}.get(params.get("adversary", ""), "querier")


def utility(group: list[CellRow]) -> Utility:
    accuracies = [float(c.utility["accuracy"]) for c in group]
    interval = accuracy_interval(group)
    counts = np.sum([p["label_histogram"] for p in group[0].partition], axis=0)
    return Utility(float(np.mean(accuracies)), interval, float(counts.max() / counts.sum()))


EXTERNAL_TARGET = "external"  # a model trained outside the workbench (fgl_workbench.external)
# what names such a model rather than its setting: a DP model's twin is the one audited on the
# same split, whatever its weights, answers and recipe
MODEL_IDENTITY = ("weights", "answers", "train_fn")


def setting(target: dict) -> dict:
    """The target's parameters that make its configuration (all but a model's identity)."""
    params = target.get("params", {})
    if target["name"] != EXTERNAL_TARGET:
        return params
    return {k: v for k, v in params.items() if k not in MODEL_IDENTITY}


def _twin(group: list[CellRow], groups: list[tuple[str, list[CellRow]]]) -> list[CellRow] | None:
    """The undefended configuration a defended one is measured against: same dataset,
    partition and target with the same parameters, no defenses, from the same results folder
    (when folders are compared)."""
    target = group[0].config["target"]
    if not target.get("defenses"):
        return None
    for _, other in groups:
        mine = other[0].config
        if (
            not mine["target"].get("defenses")
            and mine.get("results") == group[0].config.get("results")
            and mine["target"]["name"] == target["name"]
            and setting(mine["target"]) == setting(target)
            and mine["dataset"] == group[0].config["dataset"]
            and mine["partition"] == group[0].config["partition"]
        ):
            return other
    return None


def _verdict(
    label: str,
    group: list[CellRow],
    rows: list[AttackSummary],
    raw: dict[str, list[dict]],
    adversary: dict[str, str],
    mine: Utility,
    twin: Utility | None,
    delta: float,
    crossed: list[RocCurve],
) -> Verdict:
    scored = [r for r in rows if r.status == "ok" and family_of(r.attack) in READ_BY_AUC]
    scored = [r for r in scored if "auc" in r.metrics]
    readings = {r.attack: reading(r.auc_interval, r.chance) for r in scored}
    leaking = [r for r in scored if readings[r.attack] == "leaks"]
    parts = [f"{label} ({seed_text([c.config['seed'] for c in group])})."]
    strongest = _strongest(scored, raw, adversary) if scored else None
    if strongest is not None:
        parts.append(reading_sentence(list(readings.values())))
        parts.append(strongest_sentence(strongest))
    else:
        parts.append("No membership or link attack was scored.")
    epsilons = worst_epsilons(group)
    if not epsilons and group[0].config["target"]["name"] == EXTERNAL_TARGET:
        parts.append("No DP training was stated for this model (privacy=): no ε is claimed.")
    else:
        parts.append(epsilon_sentence(epsilons, delta))
    tight = worst_epsilons(group, "epsilon_pld")
    if tight:
        parts.append(
            "The PLD accountant bounds the same events tighter: "
            + "; ".join(epsilon_phrases(tight))
            + "."
        )
    parts.append(_utility_sentence(mine, twin))
    warnings = _warnings(leaking, epsilons, group, mine, delta) + _crossings(crossed)
    inconclusive = [r.attack for r in scored if readings[r.attack] == "inconclusive"]
    notes = (
        [
            f"Inconclusive: {_and(inconclusive)} (the AUC's 95 % interval holds 0.5 but "
            "reaches beyond 0.5 ± 0.05): not a leak, nor evidence of none; more seeds or "
            "records would tell."
        ]
        if inconclusive
        else []
    )
    dp = any(math.isfinite(e) for e in epsilons.values())
    quiet = all(readings[r.attack] == "at chance" for r in scored)  # below chance: a signal
    kind: Kind = "warn" if leaking or warnings else ("ok" if dp and quiet else "info")
    return Verdict(
        label,
        kind,
        " ".join(parts),
        tuple(warnings),
        tuple(notes),
        defended=bool(group[0].config["target"].get("defenses")),
        epsilons=epsilons,
        utility=mine,
        twin=twin,
        strongest=strongest,
        readings=tuple(readings.values()),
    )


def reading_sentence(readings: list[str]) -> str:
    """How many attacks read each way, in the words of the tables' reading column: "Of 3
    membership and link attacks, 1 leaks (...) and 2 are inconclusive (...)"."""
    counts = Counter(readings)
    phrases = [
        f"{counts[word]} {verb if counts[word] > 1 else singular}{meaning}"
        for word, verb, singular, meaning in READING_WORDS
        if counts[word]
    ]
    return f"Of {len(readings)} membership and link attacks, {_and(phrases)}."


# each reading as the verdict counts it: (reading, plural verb, singular verb, what it means)
READING_WORDS = (
    ("leaks", "leak", "leaks", " (the AUC's 95 % interval above its chance line's)"),
    (
        "at chance",
        "are at chance",
        "is at chance",
        " (the AUC's 95 % interval within the chance AUC ± 0.05)",
    ),
    ("below chance", "rank members below chance", "ranks members below chance", ""),
    (
        "inconclusive",
        "are inconclusive",
        "is inconclusive",
        " (the AUC's interval neither above the chance line's nor within its AUC ± 0.05)",
    ),
    ("n/a", "state no interval", "states no interval", ""),
)


def _strongest(
    scored: list[AttackSummary], raw: dict[str, list[dict]], adversary: dict[str, str]
) -> Strongest:
    """By TPR at 1 % FPR (the AUC breaking ties), or by AUC where no row resolves 1 % FPR;
    each figure with its 95 % interval."""
    low_fpr = [r for r in scored if "tpr@0.01" in r.metrics]
    top = max(
        low_fpr or scored,
        key=lambda r: (r.metrics.get("tpr@0.01", (0.0,))[0], r.metrics["auc"][0]),
    )
    low, high = top.auc_interval
    tpr = None
    if low_fpr:
        tpr = f"{top.metrics['tpr@0.01'][0]:.1%}"
        interval = seed_interval(raw.get(top.attack, []), "tpr@0.01")
        tpr += "" if interval is None else f" [{interval[0]:.1%}, {interval[1]:.1%}]"
    return Strongest(
        top.attack,
        adversary.get(top.attack, "querier"),
        f"{top.metrics['auc'][0]:.3f} [{low:.3f}, {high:.3f}]",
        tpr,
        chance_line(raw.get(top.attack, [])),
    )


def strongest_sentence(top: Strongest) -> str:
    """The strongest attack in words, with the chance line beside its AUC where stated."""
    auc = f"AUC {top.auc}" + (
        "" if top.chance is None else f" against a chance line of {top.chance}"
    )
    who = f"{top.attack} as the {top.adversary}"
    if top.tpr is None:
        return f"Strongest by AUC (no row resolves 1 % FPR): {who}, {auc}."
    return f"Strongest at low FPR: {who}, TPR {top.tpr} at 1 % FPR, {auc}."


def _crossings(crossed: list[RocCurve]) -> list[str]:
    """A warning per attack whose ROC band lies wholly above its DP ceiling somewhere."""
    return [
        f"{c.attack}'s ROC lies above the DP ceiling of ε = {c.ceiling[0]:.3g} with its whole "
        f"95 % band (at FPR {fpr_span(c.above_ceiling())}): it does better than that ε allows, "
        "so the accounting or the defense's implementation is wrong."
        for c in crossed
        if c.ceiling is not None
    ]


def worst_epsilons(group: list[CellRow], key: str = "epsilon") -> dict[tuple[str, str], float]:
    """ε per (adversary, unit), the largest over the seeds (each seed's ledger states its
    own; the configuration is only as private as its worst seed). ``key``: "epsilon" (RDP)
    or "epsilon_pld" (PLD; a row some seed has none for is left out)."""
    out: dict[tuple[str, str], float] = {}
    missing: set[tuple[str, str]] = set()
    for c in group:
        for e in c.epsilons:
            row = (e["adversary"], e["unit"])
            if e.get(key) is None:
                missing.add(row)
            else:
                out[row] = max(out.get(row, 0.0), float(e[key]))
    return {row: eps for row, eps in out.items() if row not in missing}


def epsilon_sentence(epsilons: dict[tuple[str, str], float], delta: float) -> str:
    """ε per unit, the parties with the same ε named together: "ε = 4 per record against the
    server, clients and querier (RDP, δ = 1e-05)"."""
    if not epsilons:
        return "No DP mechanism ran: no ε bounds any party."
    return "; ".join(epsilon_phrases(epsilons)) + f" (RDP, δ = {delta:g})."


def epsilon_phrases(epsilons: dict[tuple[str, str], float]) -> list[str]:
    phrases = []
    for unit in sorted({u for _, u in epsilons}):
        by_value: dict[float, list[str]] = {}
        for (who, u), eps in sorted(epsilons.items(), key=lambda item: _party(item[0][0])):
            if u == unit:
                by_value.setdefault(eps, []).append(who)
        for eps, who in sorted(by_value.items()):
            value = "∞" if not math.isfinite(eps) else f"{eps:.3g}"
            phrases.append(f"ε = {value} per {unit} against the {_and(who)}")
    return phrases


def _party(name: str) -> tuple[int, str]:
    """The parties in the order the report names them: server, other clients, querier."""
    order = ("server", "clients", "querier")
    return (order.index(name) if name in order else len(order), name)


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def accuracy_text(u: Utility) -> str:
    low, high = u.interval
    return f"{u.accuracy:.1%} [{low:.1%}, {high:.1%}]"


def change_text(mine: Utility, twin: Utility) -> str:
    cost = 100 * (twin.accuracy - mine.accuracy)
    return f"costs {cost:.1f} points" if cost >= 0 else f"gains {-cost:.1f} points"


def _utility_sentence(mine: Utility, twin: Utility | None) -> str:
    text = f"Accuracy {accuracy_text(mine)}"
    if twin is None:
        return text + "."
    return text + f" against {twin.accuracy:.1%} undefended: the defense {change_text(mine, twin)}."


def _warnings(
    leaking: list[AttackSummary],
    epsilons: dict[tuple[str, str], float],
    group: list[CellRow],
    mine: Utility,
    delta: float,
) -> list[str]:
    out = []
    if mine.accuracy <= mine.majority:
        out.append(
            f"Accuracy {mine.accuracy:.1%} is at or below the majority-class rate "
            f"({mine.majority:.1%}): the model predicts no better than the most common class, "
            "so an attack at chance here says nothing about the defense."
        )
    finite = [e for e in epsilons.values() if math.isfinite(e)]
    if any(e > VACUOUS_EPSILON for e in finite):
        worst = max(finite)
        out.append(
            f"ε = {worst:.3g} is vacuous: it allows an attack a TPR of 100 % at every FPR "
            f"above e^−ε = {math.exp(-worst):.1e}."
        )
    unbounded = sorted({w for (w, _), e in epsilons.items() if not math.isfinite(e)}, key=_party)
    if finite and unbounded:
        out.append(f"No guarantee against the {_and(unbounded)} (ε = ∞): see the ε table.")
    if finite and leaking:
        eps = min(finite)
        # e^ε overflows a float past ε ≈ 709; any ε past ln(100) already allows a TPR of 1
        ceiling = min(1.0, math.exp(min(eps, 50.0)) * 0.01 + delta)
        out.append(
            f"Attacks still beat chance under DP ({_and([r.attack for r in leaking])}): ε = "
            f"{eps:.3g} bounds the worst case (a TPR of at most {ceiling:.1%} at 1 % FPR), "
            "not every average-case signal."
        )
    violated = [a for c in group for a in c.audits if not holds(a)]
    if violated:
        out.append(
            f"The canary audit contradicts the claimed ε in {len(violated)} game(s): "
            "the mechanism leaks more than its ledger says."
        )
    return out
