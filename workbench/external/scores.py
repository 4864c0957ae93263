"""``audit_scores``: a membership audit of scores computed anywhere (a user's own attack, a
model served elsewhere), with the figures and intervals the workbench reports for its own
attacks, from the same functions (``fgl_workbench.attacks.metrics.membership_metrics``), so a
stored attack's scores audited here give its stored metrics exactly."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fgl_workbench.attacks.metrics import DEFAULT_FPRS, ROC, membership_metrics, without_epsilon
from fgl_workbench.errors import ConfigError

if TYPE_CHECKING:
    import pandas

    from fgl_workbench.storage.records import ScoredRecords

DELTA = 1e-5  # the suites' default δ (``Suite.delta``), at which the ε lower bound is held out
SHOWN_FPRS = 2  # the summary's TPR columns: the lowest audited FPRs (Carlini et al. 2022)


@dataclass(frozen=True)
class Question:
    """What a score audit asks of each record, as its summary and report word it: the
    question, and the records it says yes and no of."""

    name: str = "membership"
    yes: str = "members"
    no: str = "non-members"
    # each positive was a random draw (a member of a random split): the held-out ε bound holds;
    # edges against non-edges differ before any model sees them, so no ε is bounded there
    inclusion: bool = True

    def counts(self, m: dict[str, float | None]) -> str:
        """``140 members, 140 non-members`` from a metrics dict's class sizes."""
        return f"{int(m['members'] or 0)} {self.yes}, {int(m['nonmembers'] or 0)} {self.no}"


MEMBERSHIP = Question()
LINK = Question("link", "edges", "non-edges", inclusion=False)


@dataclass(frozen=True)
class ScoreAudit:
    """One membership audit: ``metrics`` over every record (``membership_metrics``' keys:
    ``auc`` and its interval, ``tpr@F`` with ``tpr@F_ci_low``/``_high``, ``epsilon_lb`` held
    out at ``delta`` and its ceiling, ``advantage``, the class sizes), the ROC, and
    ``groups``: the same metrics per group (None where a group lacks members or
    non-members, with the reason in ``skipped``). ``question``: what a positive is (a member
    by default; an edge for link stealing, whose metrics keep the membership keys)."""

    name: str
    metrics: dict[str, float | None]
    roc: ROC
    groups: dict[str, dict[str, float | None]]
    skipped: dict[str, str]
    delta: float
    scores: np.ndarray
    is_member: np.ndarray
    group: np.ndarray | None
    ids: np.ndarray
    fprs: tuple[float, ...] = DEFAULT_FPRS  # the FPRs a TPR was audited at
    threshold: float | None = None  # the attack's own decision threshold, where it has one
    question: Question = MEMBERSHIP

    def shown_fprs(self) -> list[float]:
        """The lowest audited FPRs, the summary's and the report's TPR columns."""
        return sorted(self.fprs)[:SHOWN_FPRS]

    def summary(self) -> str:
        """A short fixed-width table: every record, then each group."""
        rows = [("all", self.metrics)] + list(self.groups.items())
        fprs = self.shown_fprs()
        width = max(len("group"), *(len(g) for g, _ in rows))
        q = self.question
        header = (
            f"{'group':<{width}}  {q.yes:>7}  {q.no[:5] + '.':>7}  {'AUC [95 % CI]':<21}  "
            + "  ".join(f"{f'TPR@{f:g} FPR':<21}" for f in fprs)
            + f"  ε ≥ (δ={self.delta:g})"
        )
        lines = [f"{q.name} audit: {self.name}", header]
        for g, m in rows:
            lines.append(
                f"{g:<{width}}  {int(m['members'] or 0):>7}  {int(m['nonmembers'] or 0):>7}  "
                f"{interval_text(m, 'auc'):<21}  "
                + "  ".join(f"{interval_text(m, f'tpr@{f:g}'):<21}" for f in fprs)
                + f"  {number_text(m['epsilon_lb'], 2)}"
            )
        lines += [f"{g}: {why}" for g, why in self.skipped.items()]
        lines.append(
            f"n/a: fewer {q.no} than 1/FPR, so that FPR cannot be resolved; ε ≥ is a "
            "held-out lower bound at 95 % confidence (0: nothing certified), valid where the "
            f"{q.yes} were a random draw"
            + ("" if q.inclusion else f" (not so here: no bound for {q.yes})")
        )
        return "\n".join(lines)

    def to_frame(self) -> pandas.DataFrame:
        """One row per group (``all`` first), the metrics as columns."""
        import pandas as pd

        rows = [{"group": "all", **self.metrics}]
        rows += [{"group": g, **m} for g, m in self.groups.items()]
        return pd.DataFrame(rows).set_index("group")

    def records(self) -> pandas.DataFrame:
        """Each candidate's id, score and membership (``is_member``: the answer to
        ``question``, e.g. an edge) (and group, when given)."""
        import pandas as pd

        columns: dict[str, Any] = {
            "id": self.ids,
            "score": self.scores,
            "is_member": self.is_member,
        }
        if self.group is not None:
            columns["group"] = self.group
        return pd.DataFrame(columns)

    def report(self, path: str | Path) -> Path:
        """Writes the audit as a self-contained HTML page, or as a PDF where ``path`` ends in
        ``.pdf``; returns the path."""
        from fgl_workbench.external.report import write_report

        title = f"{self.question.name.capitalize()} audit: {self.name}"
        return write_report([self], title, Path(path))


def audit_scores(
    scores: Sequence[float] | np.ndarray,
    is_member: Sequence[bool] | np.ndarray,
    *,
    groups: Sequence[Any] | np.ndarray | None = None,
    ids: Sequence[int] | np.ndarray | None = None,
    delta: float = DELTA,
    threshold: float | None = None,
    fprs: tuple[float, ...] = DEFAULT_FPRS,
    name: str = "scores",
    question: Question = MEMBERSHIP,
) -> ScoreAudit:
    """Audits membership ``scores`` (higher: more likely a member) against ``is_member``:
    AUC, TPR at each of ``fprs`` (each with its stratified bootstrap interval), the held-out
    empirical ε lower bound at ``delta`` and the ROC, over every record and, with ``groups``
    (one label per record: a degree bucket, a class, a client), per group. ``threshold``
    adds the balanced accuracy of ``score > threshold``; ``question`` names what a member
    is (``LINK``: an edge). Deterministic: the intervals and the held-out split are seeded."""
    s = _scores(scores)
    truth = _membership(is_member, s.size)
    group = None if groups is None else _groups(groups, s.size)
    record_ids = np.arange(s.size) if ids is None else _labels(ids, s.size, "ids")
    if not 0.0 <= delta < 1.0:
        raise ConfigError(f"delta: expected a number in [0, 1) (got {delta!r})")
    if not fprs or not all(isinstance(f, int | float) and 0 < f < 1 for f in fprs):
        raise ConfigError(f"fprs: expected false positive rates in (0, 1) (got {fprs!r})")
    metrics, curve = membership_metrics(s, truth, threshold, fprs, delta)
    bounded = (lambda m: m) if question.inclusion else without_epsilon
    metrics = bounded(metrics)
    per_group: dict[str, dict[str, float | None]] = {}
    skipped: dict[str, str] = {}
    if group is not None:
        for g in _ordered(group):
            mine = group == g
            key = str(g)
            if truth[mine].all() or not truth[mine].any():
                skipped[key] = f"only {question.yes if truth[mine].any() else question.no}"
                continue
            per_group[key] = bounded(
                membership_metrics(s[mine], truth[mine], threshold, fprs, delta)[0]
            )
    return ScoreAudit(
        name,
        metrics,
        curve,
        per_group,
        skipped,
        delta,
        s,
        truth,
        group,
        record_ids,
        fprs,
        threshold,
        question,
    )


def audit_stored(out: str | Path, cell_id: str, attack_key: str) -> ScoreAudit:
    """``audit_scores`` on a stored membership row's own records (``fgl_workbench.storage.
    records``), at the folder's δ and with the attack's threshold: its metrics are the row's
    stored ones, exactly (the intervals and the held-out split are seeded alike)."""
    from fgl_workbench.registry import reading_untrusted
    from fgl_workbench.storage.store import ResultsStore

    with reading_untrusted(f"the results folder {out}"):
        store = ResultsStore(out, read_only=True)
        try:
            rows = {(a.cell_id, a.attack_key): a for a in store.attacks()}
            if (cell_id, attack_key) not in rows:
                raise ConfigError(f"{out}: no attack row {attack_key!r} in cell {cell_id!r}")
            records = store.load_records(cell_id, attack_key)
            delta = float(store.suite().get("delta", DELTA))
        finally:
            store.close()
    if records is None:
        raise ConfigError(
            f"{out}: attack row {attack_key!r} of cell {cell_id!r} keeps no per-record scores "
            "(only membership attacks do, in folders written since they were kept)"
        )
    return audit_records(records, delta, f"{cell_id} · {rows[(cell_id, attack_key)].label}")


def audit_records(records: ScoredRecords, delta: float, name: str) -> ScoreAudit:
    """``audit_scores`` on an attack's stored records, with its own threshold."""
    threshold = None if np.isnan(records.threshold) else records.threshold
    return audit_scores(
        records.scores,
        records.is_member,
        ids=records.ids,
        delta=delta,
        threshold=threshold,
        name=name,
    )


def degree_buckets(degree: Sequence[int] | np.ndarray) -> np.ndarray:
    """Degree groups for ``audit_scores(groups=...)``: ``0``, ``1``, ``2-3``, ``4-7``, ...
    (powers of two), since low-degree nodes are the ones membership attacks find easiest."""
    d = np.asarray(degree)
    if d.ndim != 1 or d.dtype.kind not in "iu" or (d < 0).any():
        raise ConfigError("degree: expected a 1-D array of non-negative whole numbers")
    low = np.where(d > 0, 2 ** np.floor(np.log2(np.maximum(d, 1))).astype(np.int64), 0)
    labels = [str(lo) if lo < 2 else f"{lo}-{2 * lo - 1}" for lo in low.tolist()]
    return np.array(labels)


def _scores(scores: Any) -> np.ndarray:
    if hasattr(scores, "detach"):  # a tensor, perhaps on a GPU and still carrying gradients
        scores = scores.detach().cpu()
    try:
        s = np.asarray(scores, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError("scores: expected a 1-D array of numbers") from None
    if s.ndim != 1 or s.size < 2:
        raise ConfigError(
            f"scores: expected a 1-D array of 2 or more numbers (got shape {s.shape})"
        )
    if not np.isfinite(s).all():
        raise ConfigError(
            f"scores: expected finite numbers ({int((~np.isfinite(s)).sum())} are not)"
        )
    return s


def _membership(is_member: Any, size: int) -> np.ndarray:
    m = np.asarray(is_member)
    if m.shape != (size,):
        raise ConfigError(f"is_member: expected {size} values, one per score (got shape {m.shape})")
    if m.dtype != bool:
        if m.dtype.kind not in "iuf" or not np.isin(m, (0, 1)).all():
            raise ConfigError("is_member: expected booleans (or 0/1), one per score")
        m = m.astype(bool)
    if m.all() or not m.any():
        raise ConfigError("is_member: expected both members and non-members")
    return m


def _labels(values: Any, size: int, field: str) -> np.ndarray:
    a = np.asarray(values)
    if a.shape != (size,):
        raise ConfigError(f"{field}: expected {size} values, one per score (got shape {a.shape})")
    return a


def _groups(values: Any, size: int) -> np.ndarray:
    """One label per record, none missing, no two that read the same (1 and "1")."""
    labels = _labels(np.asarray(values, dtype=object), size, "groups")  # 1 stays apart from "1"
    missing = [v for v in labels.tolist() if v is None or (isinstance(v, float) and v != v)]
    if missing:
        raise ConfigError(f"groups: expected a label for every record ({len(missing)} missing)")
    distinct = set(labels.tolist())
    if len({str(v) for v in distinct}) != len(distinct):
        raise ConfigError("groups: expected labels that read differently (e.g. not 1 and '1')")
    return labels


def _ordered(group: np.ndarray) -> list[Any]:
    """Groups in natural order: by their leading number where they have one (``2-3`` before
    ``16-31``), then as text."""
    return sorted(dict.fromkeys(group.tolist()), key=_natural)


def _natural(g: Any) -> tuple[float, str]:
    lead = re.match(r"-?\d+(\.\d+)?", str(g))
    return (float(lead.group()) if lead else float("inf"), str(g))


def number_text(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def interval_text(m: dict[str, float | None], key: str) -> str:
    if m.get(key) is None:
        return "n/a"
    lo, hi = m.get(f"{key}_ci_low"), m.get(f"{key}_ci_high")
    return f"{m[key]:.3f} [{number_text(lo)}, {number_text(hi)}]"
