"""Attack metrics computed outside the attack, from ground truth.

TPR at a fixed low FPR is the figure the membership-inference literature now leads with
(Carlini et al. 2022); it is reported "n/a" (None) when there are fewer than 1/FPR negatives,
since such an FPR cannot be resolved. AUC comes with a stratified bootstrap interval; the
empirical ε lower bound turns the best ROC point into the privacy loss a (ε, δ)-DP mechanism
would have to exceed to allow it (Jagielski et al. 2020), with Clopper–Pearson intervals on
the TPR and FPR so that sampling noise does not inflate it. Each TPR at a fixed FPR carries a
stratified bootstrap interval in which the threshold is re-chosen per resample: at 1 % FPR
over 300 non-members the TPR rests on the three top-scoring non-members, and the interval
says how much one more or fewer moves it. The best point is picked on the
same data it is bounded on, so the bound is optimistic by that selection; it is an audit
signal, not a certificate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.stats import beta, norm
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score, roc_curve
from sklearn.neighbors import NearestNeighbors

DEFAULT_FPRS = (0.1, 0.01, 0.001)
CONFIDENCE = 0.95
BOOTSTRAP = 1000
CHANCE_FOLDS = 5
CHANCE_HALVES = 100
# records the chance line is fitted on: a larger challenge gives way to a random subset of this
# size (its AUC then carries sampling error of about 0.005, inside its interval), not 101
# logistic fits over every record (400 s of a 1M-node cell)
CHANCE_RECORDS = 20_000


@dataclass(frozen=True)
class ROC:
    fpr: np.ndarray
    tpr: np.ndarray


def roc(scores: np.ndarray, truth: np.ndarray) -> ROC:
    fpr, tpr, _ = roc_curve(truth.astype(int), scores, drop_intermediate=False)
    return ROC(fpr, tpr)


def tpr_at_fpr(curve: ROC, target: float, negatives: int) -> float | None:
    if negatives < 1.0 / target:
        return None
    return float(curve.tpr[curve.fpr <= target].max())


def score_levels(scores: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Members and non-members at each distinct score, highest first: all a ROC depends on."""
    _, level = np.unique(-scores, return_inverse=True)
    size = int(level.max()) + 1
    return np.bincount(level[truth], minlength=size), np.bincount(level[~truth], minlength=size)


def roc_levels(curve: ROC, members: int, nonmembers: int) -> tuple[np.ndarray, np.ndarray]:
    """The counts per score level back from a full ROC (one point per distinct score, as
    ``roc`` keeps it) and the two class sizes: what a stored ROC needs to be resampled."""
    pos = np.rint(np.diff(curve.tpr) * members).astype(int)
    neg = np.rint(np.diff(curve.fpr) * nonmembers).astype(int)
    return pos, neg


def resampled_rocs(
    pos: np.ndarray, neg: np.ndarray, n: int = BOOTSTRAP, seed: int = 0
) -> Iterator[ROC]:
    """Blocks of bootstrap ROCs (rows): members and non-members are redrawn separately with
    replacement (a multinomial over the score levels, so both counts stay fixed) and every
    threshold is re-chosen on the resample. Seeded: the intervals are reported numbers."""
    rng = np.random.default_rng(seed)
    block = max(1, 4_000_000 // int(pos.sum() + neg.sum()))
    for start in range(0, n, block):
        b = min(block, n - start)
        tp, fp = (_cumulative_levels(rng, b, c) for c in (pos, neg))
        yield ROC(fp, tp)


def _cumulative_levels(rng: np.random.Generator, b: int, counts: np.ndarray) -> np.ndarray:
    """[b, levels + 1]: the share of ``counts.sum()`` items redrawn with replacement (b times)
    at or above each score level, from 0 (the items are laid out level by level)."""
    redrawn = np.cumsum(multiplicities(rng, b, int(counts.sum())), axis=1)
    redrawn = np.hstack([np.zeros((b, 1)), redrawn])
    return redrawn[:, np.r_[0, np.cumsum(counts)]] / counts.sum()


def tpr_at_fpr_rows(curves: ROC, target: float) -> np.ndarray:
    """``tpr_at_fpr`` of each row of ``curves`` (the best threshold of each, re-chosen)."""
    last = (curves.fpr <= target).sum(1) - 1  # FPR grows along a row: the last point within
    return curves.tpr[np.arange(last.size), last]


def tpr_intervals(
    pos: np.ndarray, neg: np.ndarray, targets: list[float], confidence: float = CONFIDENCE
) -> dict[float, tuple[float, float]]:
    """Percentile interval of the TPR at each FPR in ``targets`` over stratified bootstrap
    resamples of the score levels (``resampled_rocs``): the threshold is re-chosen in every
    resample, so its own noise (one false positive more or less at the tail) is inside."""
    draws: dict[float, list[np.ndarray]] = {t: [] for t in targets}
    for block in resampled_rocs(pos, neg):
        for t in targets:
            draws[t].append(tpr_at_fpr_rows(block, t))
    quantiles = [(1 - confidence) / 2, (1 + confidence) / 2]
    out = {}
    for t, parts in draws.items():
        lo, hi = np.quantile(np.concatenate(parts), quantiles)
        out[t] = (float(lo), float(hi))
    return out


def auc_interval(
    scores: np.ndarray, truth: np.ndarray, confidence: float = CONFIDENCE, n: int = BOOTSTRAP
) -> tuple[float, float]:
    """Percentile interval of the AUC over bootstrap resamples drawn separately from members
    and non-members (their counts stay fixed).

    A resample is a vector of multiplicities, so its AUC is Σ_i w_i·(weighted non-members
    below s_i + half those tied) / (P·Q): the scores are sorted once, and each resample costs
    one cumulative sum instead of a sort."""
    rng = np.random.default_rng(0)  # fixed: the interval is part of the reported numbers
    pos, neg = scores[truth], np.sort(scores[~truth])
    p, q = pos.size, neg.size
    left = np.searchsorted(neg, pos, side="left")
    right = np.searchsorted(neg, pos, side="right")
    block = max(1, 4_000_000 // (p + q))
    aucs = []
    for start in range(0, n, block):
        b = min(block, n - start)
        w, v = multiplicities(rng, b, p), multiplicities(rng, b, q)
        cum = np.hstack([np.zeros((b, 1)), np.cumsum(v, axis=1)])
        below = cum[:, left] + 0.5 * (cum[:, right] - cum[:, left])
        aucs.append((w * below).sum(1) / (p * q))
    lo, hi = np.quantile(np.concatenate(aucs), [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def multiplicities(rng: np.random.Generator, b: int, m: int) -> np.ndarray:
    """[b, m] counts of each item in b resamples of m items with replacement."""
    draws = rng.integers(0, m, (b, m)) + np.arange(b)[:, None] * m
    return np.bincount(draws.ravel(), minlength=b * m).reshape(b, m)


def clopper_pearson(k: np.ndarray, n: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial interval for k successes out of n, elementwise."""
    a = (1 - confidence) / 2
    k = np.asarray(k, dtype=float)
    lo = np.where(k > 0, beta.ppf(a, k, n - k + 1), 0.0)
    hi = np.where(k < n, beta.ppf(1 - a, k + 1, n - k), 1.0)
    return lo, hi


def rate_bounds(hits: int, n: int) -> tuple[float, float]:
    """The exact (Clopper–Pearson) 95 % interval of a rate of ``hits`` out of ``n``."""
    lo, hi = clopper_pearson(np.array(hits), n, CONFIDENCE)
    return float(lo), float(hi)


def held_out_epsilon(
    scores: np.ndarray,
    truth: np.ndarray,
    delta: float,
    seed: int,
    confidence: float = CONFIDENCE,
) -> float:
    """A valid lower bound on ε from a distinguishing game: the decision rule (threshold and
    direction) is chosen on half of the trials, where it gives the largest point estimate of
    ln((TPR − δ)/FPR); the other half bounds that one rule with Clopper–Pearson intervals.
    (Picking the best of many ROC points on the same trials overstates the bound: on pure
    noise of Cora's sizes it was above 0 in 8 % of trials against a nominal 2.5 %.)"""
    truth = np.asarray(truth, dtype=bool)
    half = np.random.default_rng(seed).random(truth.size) < 0.5
    best, rule = -np.inf, (np.inf, 1.0)
    for sign in (1.0, -1.0):
        s, t = sign * scores[half], truth[half]
        cuts = np.unique(s)
        # the share of members and of non-members scoring ≥ each cut, all cuts at once
        pos, neg = np.sort(s[t]), np.sort(s[~t])
        if not pos.size or not neg.size:  # nothing to choose a rule on: no bound
            continue
        tpr = (pos.size - np.searchsorted(pos, cuts, side="left")) / max(pos.size, 1)
        fpr = (neg.size - np.searchsorted(neg, cuts, side="left")) / max(neg.size, 1)
        floor = 1.0 / max(neg.size, 1)
        with np.errstate(divide="ignore"):
            values = np.log(np.maximum(tpr - delta, 1e-300) / np.maximum(fpr, floor))
        if cuts.size and values.max() > best:  # the first best cut, as a scan would keep
            i = int(np.argmax(values))
            best, rule = float(values[i]), (float(cuts[i]), sign)
    cut, sign = rule
    s, t = sign * scores[~half], truth[~half]
    hits, false = int((s[t] >= cut).sum()), int((s[~t] >= cut).sum())
    return certified_epsilon(hits, int(t.sum()), false, int((~t).sum()), delta, confidence)


def held_out_ceiling(
    truth: np.ndarray, delta: float, seed: int, confidence: float = CONFIDENCE
) -> float:
    """The largest ``held_out_epsilon`` these trials can give (a rule that catches every
    held-out member and no non-member): 0 means that nothing is certifiable at this size,
    whatever the attack; a bound below it says nothing of ε above it."""
    truth = np.asarray(truth, dtype=bool)
    held = truth[~(np.random.default_rng(seed).random(truth.size) < 0.5)]
    members, nonmembers = int(held.sum()), int((~held).sum())
    return certified_epsilon(members, members, 0, nonmembers, delta, confidence)


def certified_epsilon(
    hits: int, members: int, false: int, nonmembers: int, delta: float, confidence: float
) -> float:
    """ln((TPR − δ) / FPR) of one fixed rule, the TPR at its Clopper–Pearson low end and the
    FPR at its high end; 0 where that certifies nothing (or a class is empty)."""
    tpr_lo, _ = clopper_pearson(np.array([hits]), members, confidence)
    _, fpr_hi = clopper_pearson(np.array([false]), nonmembers, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = float(np.log((tpr_lo[0] - delta) / fpr_hi[0]))
    return max(eps, 0.0) if np.isfinite(eps) else 0.0


def membership_metrics(
    scores: np.ndarray,
    truth: np.ndarray,
    threshold: float | None = None,
    fprs: tuple[float, ...] = DEFAULT_FPRS,
    delta: float = 0.0,
) -> tuple[dict[str, float | None], ROC]:
    """``epsilon_lb`` is the held-out lower bound on the ε of the (record, querier-or-whoever
    scored) distinguishing game at ``delta``: valid at 95 %, 0 when nothing is certified;
    ``epsilon_lb_ceiling`` the most these counts could certify. ``tpr@F`` comes with its
    95 % interval ``tpr@F_ci_low``/``tpr@F_ci_high`` (None where F is not resolved)."""
    truth = np.asarray(truth, dtype=bool)
    scores = np.asarray(scores, dtype=float)
    if scores.shape != truth.shape:
        raise ValueError(f"scores {scores.shape} and truth {truth.shape} differ in shape")
    pos, neg = int(truth.sum()), int((~truth).sum())
    if not pos or not neg:
        raise ValueError("membership metrics need both members and non-members")
    curve = roc(scores, truth)
    lo, hi = auc_interval(scores, truth)
    out: dict[str, float | None] = {
        "auc": float(roc_auc_score(truth, scores)),
        "auc_ci_low": lo,
        "auc_ci_high": hi,
        "epsilon_lb": held_out_epsilon(scores, truth, delta, seed=0),
        "epsilon_lb_ceiling": held_out_ceiling(truth, delta, seed=0),
        "advantage": float((curve.tpr - curve.fpr).max()),
        "members": float(pos),
        "nonmembers": float(neg),
    }
    for f in fprs:
        out[f"tpr@{f:g}"] = tpr_at_fpr(curve, f, neg)
    resolved = [f for f in fprs if out[f"tpr@{f:g}"] is not None]
    intervals = tpr_intervals(*score_levels(scores, truth), resolved) if resolved else {}
    for f in fprs:
        out[f"tpr@{f:g}_ci_low"], out[f"tpr@{f:g}_ci_high"] = intervals.get(f, (None, None))
    if threshold is not None:
        pred = scores > threshold
        tpr, tnr = pred[truth].mean(), (~pred[~truth]).mean()
        out["balanced_accuracy"] = float((tpr + tnr) / 2)
        out["threshold_fpr"] = float(1 - tnr)
        out["threshold_tpr"] = float(tpr)
    return out, curve


def chance_line(
    facts: np.ndarray,
    truth: np.ndarray,
    strata: np.ndarray,
    seed: int,
    folds: int = CHANCE_FOLDS,
    halves: int = CHANCE_HALVES,
    confidence: float = CONFIDENCE,
    records: int = CHANCE_RECORDS,
) -> dict[str, float | None]:
    """The AUC with which members are told from non-members by their non-private facts alone
    (``fgl_workbench.attacks.challenges.public_facts``): as much of an attack's AUC may come from
    the challenge's make-up rather than from the model. A logistic regression scores each record out
    of sample (k-fold: by the model fitted without the record's fold), and the AUC is that of the
    pooled scores.

    The folds keep each stratum's members and non-members spread evenly (``strata``: the
    groups the challenge's design balances, class × client). Folds that cut across them read
    below 0.5 on a balanced challenge, as each held-out fold over-represents what its training
    folds lack: 0.42–0.49 on PROTEINS' IID challenges (seeds 0–2), 0.46–0.52 with them. The
    interval is ± z standard deviations of the same AUC over ``halves`` random halves of the
    members and of the non-members, each through its own folds (the delete-d jackknife, d =
    n/2): that spread holds the noise of fitting, which a bootstrap of the fixed scores leaves
    out (on pure noise 0.5 fell inside that one 85 times in 100); refitting on half the
    records, it errs wide. None with fewer than ``2 · folds`` members or non-members. Past
    ``records`` records, a random subset of that many (drawn from ``seed``) stands for them."""
    truth = np.asarray(truth, dtype=bool)
    if truth.size > records:
        kept = np.sort(np.random.default_rng([seed, records]).choice(truth.size, records, False))
        facts, truth, strata = facts[kept], truth[kept], np.asarray(strata)[kept]
    if min(truth.sum(), (~truth).sum()) < 2 * folds:
        return {"chance_auc": None, "chance_auc_ci_low": None, "chance_auc_ci_high": None}
    spread = facts.std(0)
    x = (facts - facts.mean(0)) / np.where(spread > 0, spread, 1.0)  # no labels read
    rng = np.random.default_rng(seed)
    auc = out_of_fold_auc(x, truth, strata, folds, rng)
    pos, neg = np.flatnonzero(truth), np.flatnonzero(~truth)
    aucs = []
    for _ in range(halves):
        half = np.concatenate(
            [
                rng.choice(pos, pos.size // 2, replace=False),
                rng.choice(neg, neg.size // 2, replace=False),
            ]
        )
        aucs.append(out_of_fold_auc(x[half], truth[half], strata[half], folds, rng))
    width = norm.ppf((1 + confidence) / 2) * float(np.std(aucs))
    return {
        "chance_auc": auc,
        "chance_auc_ci_low": max(auc - width, 0.0),
        "chance_auc_ci_high": min(auc + width, 1.0),
    }


def out_of_fold_auc(
    x: np.ndarray, truth: np.ndarray, strata: np.ndarray, folds: int, rng: np.random.Generator
) -> float:
    """AUC of logistic-regression scores, each record scored by the model fitted on the other
    folds. The records are dealt out to the folds in turn, in random order within each
    (stratum, member or not) group and group after group, so every group spreads evenly."""
    order = rng.permutation(truth.size)
    group = np.asarray(strata, dtype=np.int64) * 2 + truth
    order = order[np.argsort(group[order], kind="stable")]
    fold = np.empty(truth.size, dtype=np.int64)
    fold[order] = np.arange(truth.size) % folds
    scores = np.empty(truth.size)
    for k in range(folds):
        held = fold == k
        model = LogisticRegression().fit(x[~held], truth[~held])
        scores[held] = model.decision_function(x[held])
    return float(roc_auc_score(truth, scores))


def link_metrics(
    scores: np.ndarray, is_edge: np.ndarray, kind: np.ndarray
) -> tuple[dict[str, float | None], ROC]:
    """Membership-style metrics over the intra- and cross-client pairs (an edge is the
    "member"; no ε lower bound: ``without_epsilon``), plus AUC and average precision
    separately for pairs inside one client and pairs across clients (edges the partition cut),
    and ``auc_uniform``: He et al.'s protocol, the intra-client edges against uniformly drawn
    non-edges (easier negatives than a same-client pair, so a higher AUC from the same
    scores)."""
    ours = kind != "uniform"
    metrics, curve = membership_metrics(scores[ours], is_edge[ours])
    return {**without_epsilon(metrics), **link_extras(scores, is_edge, kind)}, curve


def without_epsilon(metrics: dict[str, float | None]) -> dict[str, float | None]:
    """The metrics with no ε lower bound (None: n/a), where the positives and negatives are
    different units by construction (edges against non-edges). The held-out bound certifies
    privacy loss only in a game that includes each unit at random; here the pairs differ
    before any model sees them, and a model that never reads an edge would "certify" ε > 1."""
    return metrics | {"epsilon_lb": None, "epsilon_lb_ceiling": None}


def link_extras(scores: np.ndarray, is_edge: np.ndarray, kind: np.ndarray) -> dict[str, float]:
    """``link_metrics`` beyond the membership-style ones: average precision over the
    intra- and cross-client pairs, and AUC and average precision per kind of pair."""
    ours = kind != "uniform"
    metrics = {"average_precision": float(average_precision_score(is_edge[ours], scores[ours]))}
    intra_edges = (kind == "intra") & is_edge
    for name, part in (
        ("intra", kind == "intra"),
        ("cut", kind == "cut"),
        ("uniform", intra_edges | (kind == "uniform")),
    ):
        truth = is_edge[part]
        if truth.any() and not truth.all():
            metrics[f"auc_{name}"] = float(roc_auc_score(truth, scores[part]))
            metrics[f"average_precision_{name}"] = float(
                average_precision_score(truth, scores[part])
            )
    return metrics


def value_fractions(values: np.ndarray, count: int) -> np.ndarray:
    """How often each of ``count`` values occurs: a client's label distribution, or the
    adversary's prior from its auxiliary pool."""
    return np.bincount(values, minlength=count) / max(values.size, 1)


def distribution_metrics(
    predicted: np.ndarray, truth: np.ndarray, prior: np.ndarray
) -> dict[str, float | None]:
    """Total-variation distance between each client's predicted and true label distribution
    (mean over clients) and how often the dominant class is right, each beside the baseline of
    predicting the adversary's prior for every client."""
    if predicted.shape != truth.shape:
        raise ValueError(f"predicted {predicted.shape} and truth {truth.shape} differ in shape")
    tv = 0.5 * np.abs(predicted - truth).sum(1)
    tv_prior = 0.5 * np.abs(prior[None, :] - truth).sum(1)
    dominant = truth.argmax(1)
    return {
        "tv_mean": float(tv.mean()),
        "tv_baseline": float(tv_prior.mean()),
        "dominant_accuracy": float((predicted.argmax(1) == dominant).mean()),
        "dominant_baseline": float((prior.argmax() == dominant).mean()),
        "clients": float(truth.shape[0]),
    }


def attribute_metrics(
    probs: np.ndarray, truth: np.ndarray, prior: np.ndarray
) -> dict[str, float | None]:
    """Accuracy, macro-F1 and AUC (one-vs-rest when there are more than two values) of the
    inferred attribute, beside the baseline of always guessing the prior's most likely value;
    the accuracy with its 95 % Clopper–Pearson interval (``accuracy_ci_low``/``_high``)."""
    predicted = probs.argmax(1)
    guess = np.full(truth.size, prior.argmax())
    right = int((predicted == truth).sum())
    lo, hi = rate_bounds(right, truth.size)
    present = np.unique(truth)
    auc = None
    if present.size > 1:
        if probs.shape[1] == 2:
            auc = float(roc_auc_score(truth, probs[:, 1]))
        else:
            cols = probs[:, present] / np.clip(probs[:, present].sum(1, keepdims=True), 1e-12, None)
            auc = float(roc_auc_score(truth, cols, multi_class="ovr", labels=present))
    return {
        "accuracy": right / truth.size,
        "accuracy_ci_low": lo,
        "accuracy_ci_high": hi,
        "accuracy_baseline": float((guess == truth).mean()),
        "macro_f1": float(f1_score(truth, predicted, average="macro")),
        "macro_f1_baseline": float(f1_score(truth, guess, average="macro")),
        "auc": auc,
        "nodes": float(truth.size),
    }


def source_metrics(
    probs: np.ndarray, owner: np.ndarray, is_member: np.ndarray
) -> dict[str, float | None]:
    """Source inference on the clients' training records: ``attribute_metrics`` of the
    guessed client (accuracy with its Clopper–Pearson interval, macro-F1, one-vs-rest AUC),
    beside three chance lines: guessing the largest client (``accuracy_baseline``), 1/K
    (``chance_uniform``), and a guesser as often on each client as this one but blind
    (``chance_matched``: Σ_k share_k · guessed_k). Per client, the precision and recall of
    its guesses. ``holdout_accuracy``: the same guesses on the clients' held-out records,
    which no model trained on: how much of the guess the data's layout (a community, a
    class mix) gives without any record being memorised."""
    clients = probs.shape[1]
    truth, guess = owner[is_member], probs[is_member].argmax(1)
    share = value_fractions(truth, clients)
    out = attribute_metrics(probs[is_member], truth, share)
    out["records"] = out.pop("nodes")
    out["chance_uniform"] = 1.0 / clients
    out["chance_matched"] = float(share @ value_fractions(guess, clients))
    for k in range(clients):
        hit = guess == k
        out[f"precision_client_{k}"] = float((truth[hit] == k).mean()) if hit.any() else None
        out[f"recall_client_{k}"] = float(hit[truth == k].mean()) if (truth == k).any() else None
    held = ~is_member
    if held.any():
        right = int((probs[held].argmax(1) == owner[held]).sum())
        lo, hi = rate_bounds(right, int(held.sum()))
        out |= {
            "holdout_accuracy": right / int(held.sum()),
            "holdout_accuracy_ci_low": lo,
            "holdout_accuracy_ci_high": hi,
        }
    return out


def unit_rows(a: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; all-zero rows stay zero (cosine 0 with anything)."""
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    return a / np.where(norms > 0, norms, 1.0)


def reconstruction_metrics(
    rows: np.ndarray,
    truth: np.ndarray,
    prior: np.ndarray,
    ordered: bool = True,
) -> tuple[dict[str, float | None], np.ndarray]:
    """How close reconstructed feature rows are to the true ones: mean cosine similarity, mean
    squared error and, for binary features, the AUC of the reconstructed values at telling
    present features from absent ones; each beside the baseline of guessing ``prior`` (the
    adversary's auxiliary mean) for every row, whose AUC is far from 0.5: it ranks the common
    features first. Unordered reconstructions (a set of rows, as
    batch gradient inversion yields) are first matched one-to-one to the truth by maximal
    total cosine (Hungarian). Returns the metrics and, per true row, its matched row."""
    if rows.shape != truth.shape:
        raise ValueError(f"reconstruction {rows.shape} and truth {truth.shape} differ in shape")
    match = np.arange(truth.shape[0])
    if not ordered:
        rec, true = linear_sum_assignment(-(unit_rows(rows) @ unit_rows(truth).T))
        match = np.empty_like(match)
        match[true] = rec
    rows = rows[match]
    cos = (unit_rows(rows) * unit_rows(truth)).sum(1)
    base = unit_rows(truth) @ unit_rows(prior[None, :])[0]
    metrics: dict[str, float | None] = {
        "cosine": float(cos.mean()),
        "cosine_baseline": float(base.mean()),
        "mse": float(((rows - truth) ** 2).mean()),
        "mse_baseline": float(((prior[None, :] - truth) ** 2).mean()),
        "feature_auc": None,
        "feature_auc_baseline": None,
        "rows": float(truth.shape[0]),
    }
    binary = np.isin(truth, (0.0, 1.0)).all()
    if binary and 0 < truth.sum() < truth.size:
        present = truth.ravel() > 0.5
        metrics["feature_auc"] = float(roc_auc_score(present, rows.ravel()))
        # the prior ranks common features first, so its AUC is well above 0.5 on real data
        guess = np.broadcast_to(prior, truth.shape).ravel()
        metrics["feature_auc_baseline"] = float(roc_auc_score(present, guess))
    return metrics, match


def singleton_metrics(
    rows: np.ndarray, truth: np.ndarray, match: np.ndarray, group_size: np.ndarray
) -> dict[str, float | None]:
    """Mean cosine over the true rows matched to a reconstruction from a one-record gradient
    (``group_size`` 1: e.g. the only node of its class at a client), where inversion is
    near-exact, beside the rest."""
    cos = (unit_rows(rows[match]) * unit_rows(truth)).sum(1)
    single = group_size[match] == 1
    return {
        "cosine_singleton": float(cos[single].mean()) if single.any() else None,
        "cosine_grouped": float(cos[~single].mean()) if (~single).any() else None,
        "singleton_rows": float(single.sum()),
    }


def label_reconstruction_metrics(
    labels: np.ndarray, truth: np.ndarray, prior: np.ndarray
) -> dict[str, float | None]:
    """Reconstructed labels (row-aligned with ``truth``): accuracy, and the accuracy of the
    label multiset (1 − total-variation distance between the label counts, what iDLG-style
    counting recovers even when rows are unmatched), beside guessing the prior's mode."""
    count = max(int(prior.size), int(labels.max(initial=0)) + 1, int(truth.max(initial=0)) + 1)
    tv = 0.5 * np.abs(value_fractions(labels, count) - value_fractions(truth, count)).sum()
    return {
        "label_accuracy": float((labels == truth).mean()),
        "label_accuracy_baseline": float((truth == prior.argmax()).mean()),
        "label_set_accuracy": float(1.0 - tv),
    }


def neighbour_mse(truth: np.ndarray, population: np.ndarray, share: float = 0.01) -> float:
    """CE-FedGNN's yardstick for an inversion's MSE: the mean squared error between a node's
    true features and those of its nearest ``share`` of the population (itself excluded),
    averaged over nodes. A reconstruction farther off than this is no closer to the node than
    its look-alikes are."""
    k = max(1, int(round(share * population.shape[0])))
    found = NearestNeighbors(n_neighbors=k + 1).fit(population).kneighbors(truth)[0]
    return float((found[:, 1:] ** 2).mean() / truth.shape[1])
