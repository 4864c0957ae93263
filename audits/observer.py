"""How an auditor scores canaries from everything its adversary observed: every release at
once (each round's global model, each upload, each step's model, each perturbed hop).

A canary's evidence in release r is a number ``a[r, i]`` (its projection on its own
direction, say) whose mean moves by ``signs[r, i] · unit`` when the canary contributes. The
signs are the auditor's: a canary's contribution flips from release to release in a pattern
only the auditor knows, so that noise reused across releases, which a constant contribution
would hide, cancels in the changes. The auditor does not take the claimed noise on trust: it
measures each release's noise on *null* directions, drawn by it and never inserted, so a
mechanism with less noise than it claims, or none in some releases, is scored as it is.

Four views are computed, each the log-likelihood ratio of "included" against "excluded"
under independent Gaussian noise of the measured size:

- ``releases``: the releases themselves, the Neyman–Pearson test of a correct mechanism (a
  Poisson mixture per release where the adversary does not see who took part);
- ``changes`` and ``changes over two``: each release minus the one 1 or 2 before it, where
  noise repeated at that lag cancels;
- ``sums``: each release plus the one before it, where noise that flips its sign cancels.

``combined`` standardises each view by the same statistic on null directions played as
canaries and adds them up: one score per canary, a function of the observations alone, so
the bounds computed from it hold and no view costs the others a share of the confidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

FLOOR = 1e-12  # a measured noise scale is never taken below this (exactly noise-free releases)
RELATIVE_FLOOR = 1e-6  # nor below this share of the noisiest release's


@dataclass(frozen=True)
class Observed:
    """What the adversary saw, reduced to the canaries' evidence.

    ``signal`` [R, m]: each canary's evidence in each release (NaN: no such release for that
    canary, e.g. it did not upload); ``null`` [R, 1, J] for releases every canary shares (a
    global model) or [R, m, J] for each canary's own (its upload): the same statistic on J
    null directions (NaN where absent), whose spread is that release's noise; ``signs``
    [R, m]: the sign of the canary's contribution in each release if it takes part (0: it
    cannot); ``unit``: how far one contribution moves the evidence's mean; ``rate``: the probability
    that an included canary takes part in a release, unseen by the adversary (1: it always
    does, or the adversary sees whether it did). ``replace``: the two hypotheses are +sign
    and −sign (replace one), rather than a contribution and none (add or remove one).
    ``paired``: also score the views that pair releases (``PAIRS``), which assume each
    release's participation independent; not where a contribution, once there, stays in
    every release (an edge the degree bound kept)."""

    signal: torch.Tensor
    null: torch.Tensor
    signs: torch.Tensor
    unit: float
    rate: float = 1.0
    replace: bool = False
    paired: bool = True


def noise_scale(null: torch.Tensor) -> torch.Tensor:
    """[R, 1 or m] the root mean square of each release's null evidence (its noise's scale)."""
    finite = torch.isfinite(null)
    squares = torch.where(finite, null, torch.zeros_like(null)) ** 2
    count = finite.sum(-1).clamp(min=1)
    scale = (squares.sum(-1) / count).sqrt()
    # a noise-free release weighs a million times a noisy one, not so much that the noisy
    # releases' evidence is lost to rounding beside it
    return scale.clamp(min=max(FLOOR, RELATIVE_FLOOR * float(scale.max())))


def paired(x: torch.Tensor, lag: int, sign: float) -> torch.Tensor:
    """[R − lag, ...] each release combined with the one ``lag`` before it (NaN stays NaN)."""
    return x[lag:] + sign * x[:-lag]


# (view, lag, sign): each release beside the one ``lag`` before it; a difference cancels
# noise repeated at that lag, a sum noise that flips its sign between the two
PAIRS = (("changes", 1, -1.0), ("changes over two", 2, -1.0), ("sums", 1, 1.0))


def scores(observed: Observed) -> dict[str, np.ndarray]:
    """Each view's statistic per canary, higher meaning "more likely included"."""
    o = observed
    signal, null, signs = o.signal.double(), o.null.double(), o.signs.double()
    out = {"releases": _summed(_releases(signal, noise_scale(null), signs, o), signal)}
    for name, lag, sign in PAIRS if o.paired else ():
        if signal.shape[0] > lag:
            d, sd = paired(signal, lag, sign), noise_scale(paired(null, lag, sign))
            out[name] = _summed(_pairs(d, sd, signs, o, lag, sign), d)
    return out


def combined(observed: Observed) -> np.ndarray:
    """One score per canary: the sum of its views, each standardised by the same statistic
    computed on null directions played as canaries that never contribute (the output
    alone), so a view in which the canaries stand far out of the noise decides, whichever it
    is, and no view costs the others a share of the confidence (measured on σ/3 over 10
    seeds at 500 canaries: central DP-FedAvg caught 3 times with the sum, 2 with the
    maximum, 1 with the views tested apart; the releases alone 3)."""
    views, nulls = scores(observed), scores(_as_canaries(observed))
    z = []
    for name, s in views.items():
        centre = float(np.mean(nulls[name]))
        # a view in which the null directions do not move at all is noise-free: a floor, not
        # zero, so that the canaries that do move there decide
        spread = max(float(np.std(nulls[name])), 1e-9 * abs(centre), FLOOR)
        z.append((s - centre) / spread)
    return np.sum(z, axis=0)


def _as_canaries(o: Observed) -> Observed:
    """The null directions' evidence as canaries of their own (each null direction of
    shared releases, the first of each canary's own), with the canaries' sign patterns and
    the remaining null directions as their noise."""
    null = o.null.double()
    if null.shape[1] == 1:  # shared releases: J pseudo-canaries
        signal = null[:, 0, :]
        repeats = -(-signal.shape[1] // o.signs.shape[1])
        signs = o.signs.double().repeat(1, repeats)[:, : signal.shape[1]]
        return replace(o, signal=signal, null=null[..., 1:], signs=signs)
    return replace(o, signal=null[..., 0], null=null[..., 1:])


def _summed(terms: torch.Tensor, signal: torch.Tensor) -> np.ndarray:
    """Σ over releases, where the canary has evidence, of its log-likelihood ratio."""
    keep = torch.isfinite(signal) & torch.isfinite(terms)
    return torch.where(keep, terms, torch.zeros_like(terms)).sum(0).numpy(force=True)


def _releases(a: torch.Tensor, sd: torch.Tensor, signs: torch.Tensor, o: Observed):
    v = signs * o.unit / sd  # the contribution in noise units
    z = a / sd
    if o.replace:
        return 2 * v * z
    return _mixture(z, [(1 - o.rate, torch.zeros_like(v)), (o.rate, v)])


def _pairs(d: torch.Tensor, sd: torch.Tensor, signs: torch.Tensor, o: Observed, lag, sign):
    """A pair holds this release's contribution plus ``sign`` times the one ``lag`` before:
    under "included" each took part with probability ``rate``, independently."""
    now, before = signs[lag:] * o.unit / sd, sign * signs[:-lag] * o.unit / sd
    z = d / sd
    if o.replace:
        return 2 * (now + before) * z
    q = o.rate
    cases = [
        ((1 - q) ** 2, torch.zeros_like(now)),
        (q * (1 - q), now),
        (q * (1 - q), before),
        (q * q, now + before),
    ]
    return _mixture(z, cases)


def _mixture(z: torch.Tensor, cases: list[tuple[float, torch.Tensor]]) -> torch.Tensor:
    """log Σ_k p_k · N(z; v_k, 1) / N(z; 0, 1), over the cases of positive probability."""
    terms = [math.log(p) + v * z - v**2 / 2 for p, v in cases if p > 0]
    return torch.logsumexp(torch.stack(terms), dim=0)
