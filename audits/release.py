"""Canary pairs for metric-DP on released embeddings: each canary is a pair of unit vectors
(a, b) at distance exactly ρ (the distance the run's ε(ρ) is read at). The challenger releases,
as many times as the ledger counts, a or b in a pattern only the auditor knows (included: b
where the pattern says +1; excluded: the other one of the pair), through the defense's own
mechanism (``metric_dp.privatize``: normalise, then noise) from copies scaled past unit norm,
so the normalisation must act. Two nodes whose vectors are within ρ at every release are the
claim's neighbours. The adversary, who knows both, scores every release together with the
likelihood ratio (the Neyman–Pearson test), the noise of each release measured on directions
orthogonal to its pair (``audits.observer``)."""

from __future__ import annotations

import math

import torch

from fgl_workbench.accountants import MetricGaussian
from fgl_workbench.audits.canary import Context, Trial, directions, flips, inclusion, trial
from fgl_workbench.audits.observer import Observed
from fgl_workbench.defenses import metric_dp
from fgl_workbench.defenses.metric_dp import MetricDPConfig

FEATURES = 64
SCALE = 5.0  # canary vectors reach the mechanism this long: its normalisation must act
NULLS = 48  # directions orthogonal to each pair that the observer measures noise on


class MetricDPGame:
    defense = "metric-dp"

    def play(
        self,
        config: MetricDPConfig,
        context: Context,
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        events = [
            e
            for e in context.ledger.events
            if isinstance(e, MetricGaussian) and e.sigma0 == config.sigma0
        ]
        rho = context.rho
        if not events or rho is None or not 0 < rho <= 2:
            return []  # no release was made, or no ρ in (0, 2] to read ε(ρ) at
        releases = sum(e.releases for e in events)
        a, w = _pair_at_distance(m, rho, generator)
        theta = 2 * math.asin(rho / 2)
        b = math.cos(theta) * a + math.sin(theta) * w
        mid, towards = (a + b) / 2, (b - a) / rho
        nulls = _orthogonal(a, w, generator)  # [m, NULLS, FEATURES]
        included = inclusion(m, generator)
        signs = flips(releases, m, generator)
        which = signs * (included.double() * 2 - 1)  # +1: b is released
        signal = torch.zeros(releases, m, dtype=torch.float64)
        null = torch.zeros(releases, m, NULLS, dtype=torch.float64)
        for r in range(releases):
            chosen = torch.where(which[r, :, None] > 0, b, a)
            _, noisy = metric_dp.privatize(SCALE * chosen, config.sigma0, generator)
            signal[r] = ((noisy - mid) * towards).sum(1)
            null[r] = torch.einsum("mf,mjf->mj", noisy - mid, nulls)
        observed = Observed(signal, null, signs, rho / 2, replace=True)
        how = f"metric-DP release, {releases} releases, canary pairs at ρ = {rho:.4f}"
        # each pair is released on its own, its noise measured on its own orthogonal
        # directions: the canaries are independent runs of the mechanism
        return [trial(observed, included, events, "node", how, rho, independent=True)]


def _pair_at_distance(m: int, rho: float, generator: torch.Generator):
    """m unit vectors a and unit vectors w orthogonal to them: b = cos θ·a + sin θ·w with
    2·sin(θ/2) = ρ is then at distance ρ from a."""
    a = directions(m, FEATURES, generator)
    w = torch.randn(m, FEATURES, generator=generator, dtype=torch.float64)
    w = w - (w * a).sum(1, keepdim=True) * a
    return a, w / w.norm(dim=1, keepdim=True)


def _orthogonal(a: torch.Tensor, w: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """[m, NULLS, FEATURES] unit directions orthogonal to each pair's plane span(a, w)."""
    r = torch.randn(a.shape[0], NULLS, a.shape[1], generator=generator, dtype=torch.float64)
    for basis in (a, w):
        r = r - (r * basis[:, None]).sum(2, keepdim=True) * basis[:, None]
    return r / r.norm(dim=2, keepdim=True)
