"""RDP curves ε_RDP(α) of the Gaussian, Poisson-subsampled Gaussian and Laplace mechanisms.

Every function broadcasts: parameters of shape (B,) against orders of shape (K,) give (B, K).
The subsampled Gaussian follows Mironov, Talwar & Zhang (2019), the analysis Opacus implements:
an exact finite sum for integer α and a convergent series for fractional α, both in log space,
so tiny q, large σ and huge step counts stay finite. Agreement with Opacus is tested to 1e-9
where Opacus's series is sound.

A fractional order's series is never trusted blindly: (α − 1)·RDP(α) = log A_α is convex and
non-decreasing in α, so log A at the neighbouring integers brackets it (at least A at ⌊α⌋, at
most the chord between ⌊α⌋ and ⌈α⌉). A series value outside that bracket (or not finite) is
replaced by the chord, a valid upper bound; where the series' rounding is not negligible
beside log A (tiny q), its rounding allowance is added. Opacus stops its series at the first
term below e^-30, which for large α·log(1/(1−q)) is the very first term: it then returns a
negative RDP (q = 0.2, σ = 10, α = 160.5 gave −0.22), and ε = 0 after conversion."""

from __future__ import annotations

import contextvars
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.special import binom, gammaln, log_ndtr

_STOP = -30.0  # Opacus stops the fractional series after the first term below e^-30
_MAX_TERMS = 10_000_000
_FIRST_BLOCK = 12  # most series end within ~10 terms; the long tail gets doubling blocks
_CHUNK = 1024  # configurations per block of work (cache-sized)
# The fractional series' signed sum carries an absolute rounding error in log A of some ulps
# of its terms' total mass over A: up to ~400 measured against 40-digit quadrature (σ ≈ 0.6,
# where the terms span e^±100); 1024 are allowed. Beyond _NEGLIGIBLE of log A (the relative
# rounding the accountant treats as exact, and tests against Opacus to) the allowance is added.
_ROUNDING = 1024 * np.finfo(float).eps
_NEGLIGIBLE = 1e-9


def gaussian(noise_multiplier: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """One Gaussian release with noise std = noise_multiplier × L2 sensitivity: α / (2 z²)."""
    z = np.asarray(noise_multiplier, dtype=float)[..., None]
    with np.errstate(divide="ignore"):
        return np.asarray(orders, dtype=float) / (2 * z**2)


def laplace(scale_ratio: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """One Laplace release with scale b = scale_ratio × L1 sensitivity (Mironov 2017, Prop. 6):
    1/(α−1) · log( α/(2α−1) e^{(α−1)/λ} + (α−1)/(2α−1) e^{−α/λ} )."""
    lam = np.asarray(scale_ratio, dtype=float)[..., None]
    a = np.asarray(orders, dtype=float)
    with np.errstate(divide="ignore"):
        first = np.log(a / (2 * a - 1)) + (a - 1) / lam
        second = np.log((a - 1) / (2 * a - 1)) - a / lam
    return np.logaddexp(first, second) / (a - 1)


def subsampled_gaussian(
    q: np.ndarray,
    noise_multiplier: np.ndarray,
    orders: np.ndarray,
    needed: np.ndarray | None = None,
) -> np.ndarray:
    """One step of the Poisson-subsampled Gaussian mechanism (sampling rate q). ``needed``
    (one row per configuration, one column per order): a fractional order a configuration
    does not need is NaN there, its series (nearly all of the time) not summed."""
    q = np.atleast_1d(np.asarray(q, dtype=float))
    z = np.atleast_1d(np.asarray(noise_multiplier, dtype=float))
    q, z = np.broadcast_arrays(q, z)
    orders = np.asarray(orders, dtype=float)
    out = np.empty(q.shape + orders.shape)
    full = q == 1.0
    with np.errstate(divide="ignore"):
        out[full] = orders / (2 * z[full, None] ** 2)
    out[q == 0] = 0.0
    out[(z == 0) & (q > 0)] = np.inf
    sub = (q > 0) & (q < 1) & (z > 0)
    if sub.any():
        wanted = np.ones((q.size, orders.size), bool) if needed is None else needed
        out[sub] = _log_a_chunked(q[sub], z[sub], orders, wanted[sub]) / (orders - 1)
    return out


def _log_a_chunked(
    q: np.ndarray, z: np.ndarray, orders: np.ndarray, needed: np.ndarray
) -> np.ndarray:
    """``_log_a`` over blocks of configurations, on threads: blocks keep the working arrays in
    cache, and numpy releases the GIL inside each operation, so the cores share the work."""
    starts = range(0, q.size, _CHUNK)
    if len(starts) == 1:
        return _log_a(q, z, orders, needed)

    def block(s: int) -> np.ndarray:
        rows = slice(s, s + _CHUNK)
        return _log_a(q[rows], z[rows], orders, needed[rows])

    # each thread in a copy of this context, so the caller's np.errstate holds there too
    threads = min(len(starts), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        running = [pool.submit(contextvars.copy_context().run, block, s) for s in starts]
        return np.concatenate([r.result() for r in running])


def _log_a(q: np.ndarray, z: np.ndarray, orders: np.ndarray, needed: np.ndarray) -> np.ndarray:
    """log A_α for every order: the exact sum at integer orders; at fractional ones the series
    where it lies in its bracket from the neighbouring integer orders, else the bracket's upper
    end (the chord of the convex log A between ⌊α⌋ and ⌈α⌉); NaN at a fractional order not
    ``needed``. Every integer order needed, listed or bracketing, is summed once."""
    is_int = orders == np.round(orders)
    frac = orders[~is_int]
    lo_order, hi_order = np.floor(frac), np.ceil(frac)
    ints = np.unique(np.concatenate([orders[is_int], lo_order, hi_order]))
    ints = ints[ints >= 2].astype(np.int64)
    at = {1: np.zeros(q.size)}  # log A_1 = 0
    if ints.size:
        table = _log_a_int(q, z, ints)
        at.update({int(a): table[:, j] for j, a in enumerate(ints.tolist())})
    out = np.empty((q.size, orders.size))
    if is_int.any():
        out[:, is_int] = np.stack([at[int(a)] for a in orders[is_int]], 1)
    if frac.size:
        floor = np.stack([at[int(a)] for a in lo_order], 1)
        ceil = np.stack([at[int(a)] for a in hi_order], 1)
        chord = floor + (frac - lo_order) * (ceil - floor)
        series, mass = _log_a_frac(q, z, frac, needed[:, ~is_int])
        # tiny q: log A (~1e-16) is below what the sum of O(1) terms resolves, and the series
        # fell 4 % under the true value (q = 1e-6, σ = 50, α = 3.3): with its rounding
        # allowance it is a bound again, or the chord takes over
        with np.errstate(over="ignore", invalid="ignore"):
            rounding = _ROUNDING * np.exp(mass - series)
            bound = np.where(rounding > _NEGLIGIBLE * series, series + rounding, series)
        # within rounding of the two sums above the chord; never below the integer order's
        # value (log A grows with α), where a series lost in rounding would understate the RDP
        slack = 1e-9 * np.maximum(1.0, np.abs(chord))
        sound = np.isfinite(bound) & (bound >= floor) & (series <= chord + slack)
        value = np.where(sound, np.minimum(bound, chord), chord)
        out[:, ~is_int] = np.where(needed[:, ~is_int], value, np.nan)
    return out


def _log_a_int(q: np.ndarray, z: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """log A_α = log Σ_{i=0..α} C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/(2z²)}, as
    log(1 + Σ_{i≥2} C(α,i) q^i (1−q)^{α−i} (e^{(i²−i)/(2z²)} − 1)) (the binomial weights sum
    to 1): every term is non-negative, so log A is too even where it is ~1e-28 and the direct
    sum would round to a negative value. One order at a time so memory stays (B × α)."""
    lq, l1q = np.log(q)[:, None], np.log1p(-q)[:, None]
    inv = 1.0 / (2 * z[:, None] ** 2)
    i = np.arange(2, int(orders.max(initial=2)) + 1, dtype=float)
    # the part of each term that does not depend on α: i·log(q/(1−q)) + log(e^{(i²−i)/2z²} − 1)
    shared = i * (lq - l1q) + _log_expm1((i * i - i) * inv)
    out = np.empty((q.size, orders.size))
    for k, a in enumerate(orders.tolist()):
        n = a - 1  # terms i = 2..a
        log_c = gammaln(a + 1) - gammaln(i[:n] + 1) - gammaln(a - i[:n] + 1)
        terms = log_c + shared[:, :n]
        top = terms.max(axis=1, keepdims=True)
        excess = a * l1q[:, 0] + top[:, 0] + np.log(np.exp(terms - top).sum(axis=1))
        out[:, k] = np.logaddexp(0.0, excess)
    return out


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x − 1) for x > 0, without overflow for large x."""
    with np.errstate(over="ignore"):
        return np.where(x > 30, x + np.log1p(-np.exp(-np.minimum(x, 745))), np.log(np.expm1(x)))


def _log_a_frac(
    q: np.ndarray, z: np.ndarray, orders: np.ndarray, needed: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided erfc series for fractional α (Mironov et al. 2019, Sec. 3.3): log A and
    the log of its terms' total absolute mass (what its rounding error scales with), for each
    (configuration, order) pair ``needed`` (-inf elsewhere).

    Terms are computed in growing blocks along i for the pairs still running; a pair's
    series ends at its first term past i = α that is e^-30 below the largest term so far
    (Opacus ends at the first term below e^-30, which can come before the series' mass and
    agrees with this rule wherever that mass is above e^-30 near i = 0). Positive- and
    negative-coefficient terms are summed apart and combined once, so the sum is the same as
    Opacus's term-by-term additions up to rounding."""
    b, k = q.size, orders.size
    order_of = np.tile(np.arange(k), b)
    pa = orders[order_of]
    lq, l1q = np.log(q), np.log1p(-q)
    half_inv_var, scale = 1 / (2 * z**2), np.sqrt(2) * z
    z0 = z**2 * np.log(1 / q - 1) + 0.5
    sums = {key: np.full(b * k, -np.inf) for key in ("p0", "n0", "p1", "n1")}
    peaks = np.full(b * k, -np.inf)
    active = np.flatnonzero(needed)
    start, width = 0, _FIRST_BLOCK
    while active.size:
        if start >= _MAX_TERMS:
            raise ArithmeticError("fractional-order RDP series did not converge")
        i = np.arange(start, start + width, dtype=float)
        coef = binom(orders[:, None], i[None, :])  # (K, width), shared by all configurations
        kk = order_of[active]
        log_c, pos = np.log(np.abs(coef))[kk], (coef > 0).astype(float)[kk]
        aa = pa[active, None]
        # what depends on the configuration and i (side 0) or j = α − i (side 1) only, not on
        # α itself, is computed once per configuration and gathered: the erfc terms dominate
        pairs, row = np.unique(active // k, return_inverse=True)
        lqu, l1qu = lq[pairs, None], l1q[pairs, None]
        hv, sc, z0u = half_inv_var[pairs, None], scale[pairs, None], z0[pairs, None]
        js, j_at = np.unique(orders[:, None] - i[None, :], return_inverse=True)
        side0 = i * (lqu - l1qu) + (i * i - i) * hv + _log_erfc((i - z0u) / sc)
        side1 = js * lqu + (js * js - js) * hv + _log_erfc((z0u - js) / sc)
        s0 = log_c + side0[row] + aa * l1qu[row]
        s1 = log_c + side1[row[:, None], j_at.reshape(k, width)[kk]] + i * l1qu[row]
        top = np.maximum(s0, s1)
        peak = np.maximum.accumulate(np.maximum(top, peaks[active, None]), axis=1)
        below = (top < peak + _STOP) & (i[None, :] >= aa)
        done = below.any(axis=1)
        last = np.where(done, below.argmax(axis=1), width - 1)
        keep = np.arange(width)[None, :] <= last[:, None]
        for side, s in (("0", s0), ("1", s1)):
            s = np.where(keep, s, -np.inf)  # terms past a series' end may be NaN
            shift = s.max(axis=1)
            shift = np.where(np.isfinite(shift), shift, 0.0)
            e = np.exp(s - shift[:, None])
            with np.errstate(divide="ignore"):
                for key, w in (("p" + side, pos), ("n" + side, 1.0 - pos)):
                    block = np.log(np.einsum("ij,ij->i", e, w)) + shift
                    sums[key][active] = np.logaddexp(sums[key][active], block)
        peaks[active] = np.where(np.isfinite(peak[:, -1]), peak[:, -1], peaks[active])
        active = active[~done]
        start += width
        width = min(2 * width, 1024)
    log_a0 = _log_diff(sums["p0"], sums["n0"])
    log_a1 = _log_diff(sums["p1"], sums["n1"])
    mass = np.logaddexp.reduce(np.stack(list(sums.values())), axis=0)
    return np.logaddexp(log_a0, log_a1).reshape(b, k), mass.reshape(b, k)


def _log_diff(log_pos: np.ndarray, log_neg: np.ndarray) -> np.ndarray:
    """log(e^pos − e^neg); NaN if negative (Opacus raises there; it does not happen for valid
    q, σ, α)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        out = log_pos + np.log1p(-np.exp(log_neg - log_pos))
    out = np.where(log_neg == -np.inf, log_pos, out)
    return np.where(log_neg > log_pos, np.nan, out)


def _log_erfc(x: np.ndarray) -> np.ndarray:
    """log(erfc(x)) + log(1/2), the form the series uses: log Φ(−√2 x)."""
    return log_ndtr(-x * np.sqrt(2))
