"""Whether uploads carry the noise a local DP mod states: the tests ``FlowerRecorder`` runs on
what a user's clients uploaded before it trusts their ``LocalDpMod``.

Each upload is an update u + z against the model its client was sent: u clipped to ``clip``
(‖u‖ ≤ C), z the noise, i.i.d. Gaussian of ``std`` per entry under the claim. Every test
below holds a correct mod with probability at least 1 − ``NOISE_TEST_P`` (split over what it
tests), whatever u is within the clip; each catches a way real DP code breaks."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from scipy.stats import chi2, kstest

# a correct mod is flagged by one test with probability below this
NOISE_TEST_P = 1e-6
DENSITY_AT_0 = 1 / math.sqrt(2 * math.pi)
# the share of exact zeros past which an upload was changed after the noise (a float32
# Gaussian draw is exactly 0 with probability ~1e-9 an entry)
SPARSE = 0.01

Update = Mapping[str, torch.Tensor]  # one upload's update, array by array (floating only)


def noise_problems(updates: Sequence[Update], std: float, clip: float) -> list[str]:
    """What the updates contradict of noise of ``std`` on updates clipped to ``clip``, each
    test over the updates of one model (a main may train two): the noise too short for one
    upload or for all together, on one array, misshapen, or shared by two uploads of any
    rounds; or too few numbers for the tests to see the noise at all."""
    problems: set[str] = set()
    models: dict[tuple[tuple[str, tuple[int, ...]], ...], list[Update]] = {}
    for u in updates:
        models.setdefault(tuple((k, tuple(v.shape)) for k, v in u.items()), []).append(u)
    for same in models.values():
        whole = [torch.cat([v.double().reshape(-1) for v in u.values()]) for u in same]
        if any(float((w == 0).double().mean()) > SPARSE for w in whole):
            problems.add(
                "uploads hold exact zeros, as Gaussian noise never does: changed after "
                "LocalDpMod (e.g. sparsified), their noise cannot be checked"
            )
            continue
        if unverifiable(len(whole), whole[0].numel(), std, clip):
            problems.add(
                f"{len(whole)} uploads of {whole[0].numel()} numbers cannot show noise of "
                f"std {std:.3g} at clip {clip:g}: a mod that never ran would pass the tests"
            )
        elif short_noise(whole, std, clip):
            problems.add("uploads carry less noise than LocalDpMod's: it did not run as stated")
        if any(short_noise([u[k].double().reshape(-1) for u in same], std, clip) for k in same[0]):
            problems.add("an array of the uploads carries less noise than LocalDpMod's")
        if misshapen_noise(whole, std, clip):
            problems.add("uploads' entries are not the i.i.d. Gaussian noise LocalDpMod states")
        if shared_noise(whole, std, clip):
            problems.add("two uploads share their noise: the server cancels it")
        if shifted_noise(whole, std, clip):
            problems.add("two uploads share their noise shifted by some entries: it cancels")
    return sorted(problems)


def unverifiable(uploads: int, d: int, std: float, clip: float) -> bool:
    """Whether ``uploads`` clean updates at the clip, no noise at all, would pass
    ``short_noise``'s pooled test: a model too small (σ√d near C) to tell noise from none."""
    return bool(chi2.cdf(uploads * (2 * clip / std) ** 2, uploads * d) >= NOISE_TEST_P / 2)


def short_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether updates ``u + z`` are too short for noise of ``std`` per entry: ‖z‖ ≤
    ‖u + z‖ + clip and ‖z‖²/std² is χ²(d) under the claim. The shortest update decides for
    one upload (a round the mod skipped; a tenth short on 10⁵ entries), their sum of squares
    against χ²(n·d) for all together (every upload a little short on a small model)."""
    if not updates:
        return False
    k, d = len(updates), updates[0].numel()
    lengths = [((float(u.norm()) + clip) / std) ** 2 for u in updates]
    one = chi2.cdf(min(lengths), d) < NOISE_TEST_P / (2 * k)
    return bool(one or chi2.cdf(sum(lengths), k * d) < NOISE_TEST_P / 2)


def shared_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether two updates, of one round or of two, are closer than independent noise
    allows, as they are or one negated: the difference (and the sum) of two noises of
    ``std`` is Gaussian of std·√2, and ‖z_i ∓ z_j‖ ≤ ‖Δ_i ∓ Δ_j‖ + 2·clip, each update
    against its own model (the same draw in every client, a generator seeded by the round
    or by the client; one draw added by one client and subtracted by another)."""
    if len(updates) < 2:
        return False
    x = torch.stack([u.double() for u in updates])
    squares = (x * x).sum(1)
    products = x @ x.T
    k = len(updates)
    apart = ~torch.eye(k, dtype=torch.bool)
    closest = min(
        float((squares[:, None] + squares[None, :] - sign * 2 * products)[apart].min())
        for sign in (1, -1)
    )
    tests = k * (k - 1)  # each pair, difference and sum
    statistic = ((max(closest, 0.0) ** 0.5 + 2 * clip) / (std * 2**0.5)) ** 2
    return bool(chi2.cdf(statistic, x.shape[1]) < NOISE_TEST_P / tests)


def shifted_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether two updates carry one noise stream shifted by s entries (0 < |s| ≤ d/2), as
    they are or one negated: a generator seeded alike whose clients drew different amounts
    before the mod drew (``shared_noise`` reads lag 0). Their cross-correlation at lag s,
    Σ_t x_i[t+s]·x_j[t] over the L = d − |s| overlapping entries, is under independent noise
    a sum of L products of independent N(0, σ²) pairs, beyond σ²t with probability at most
    2·exp(−min(t²/4L, t/4)) (Bernstein: each product's log-MGF is below λ² for |λ| ≤ 1/2),
    plus what the clipped updates add: ≤ 2C‖z‖ + C², ‖z‖ at its χ²(d) quantile. A shared
    shifted stream gives ≈ σ²L. Every pair and lag (an FFT a pair), Bonferroni over them."""
    k = len(updates)
    if k < 2:
        return False
    d = updates[0].numel()
    size = 1 << (2 * d - 1).bit_length()
    spectra = [torch.fft.rfft(u.double(), size) for u in updates]
    lags = torch.arange(1, d // 2 + 1)
    overlap = (d - lags).double()
    tests = k * (k - 1) * len(lags) * 2  # pairs both ways round, lags, and their slack
    log_p = math.log(2 * tests / NOISE_TEST_P)
    noise_norm = std * math.sqrt(chi2.ppf(1 - NOISE_TEST_P / (2 * k), d))
    slack = 2 * clip * noise_norm + clip**2
    bound = std**2 * torch.maximum(
        (4 * overlap * log_p).sqrt(), torch.full_like(overlap, 4 * log_p)
    )
    bound = bound + slack
    for i in range(k):
        for j in range(i + 1, k):
            c = torch.fft.irfft(spectra[i] * spectra[j].conj(), size)
            # c[s] = Σ x_i[t+s]·x_j[t]; c[size − s] = Σ x_i[t]·x_j[t+s]
            both = torch.stack([c[lags], c[size - lags]])
            if bool((both.abs() > bound).any()):
                return True
    return False


def misshapen_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether an update's entries are too far from i.i.d. Gaussian noise of ``std`` (noise
    on a few entries at the stated length, a clean step as long as the noise), by their
    Kolmogorov–Smirnov distance to N(0, 1) after dividing by ``std``. Under the claim that
    distance is at most the noise's own, below √(ln(2/p)/2d) but with probability p
    (Massart's DKW), plus what ‖u‖ ≤ ``clip`` can move: at most φ(0)·t + ‖u/std‖²/(t²d)
    for every t (entries moved more than t are at most ‖u/std‖²/t² in number)."""
    if not updates:
        return False
    d = updates[0].numel()
    p = NOISE_TEST_P / len(updates)
    b = (clip / std) ** 2 / d
    t = (2 * b / DENSITY_AT_0) ** (1 / 3)  # where φ(0)·t + b/t² is least
    bound = (math.log(2 / p) / (2 * d)) ** 0.5 + DENSITY_AT_0 * t + b / t**2
    worst = max(kstest(u.double().numpy() / std, "norm").statistic for u in updates)
    return bool(worst > bound)
