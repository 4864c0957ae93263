"""Canary pairs for metric-DP on released embeddings: each canary is a pair of unit vectors at
distance exactly ρ (the distance the run's ε(ρ) is read at); the challenger releases one of
them as many times as the ledger counts, through the defense's own noise, and the adversary,
who knows both, scores with the likelihood ratio (the Neyman–Pearson test)."""

from __future__ import annotations

import math

import torch

from accountants import MetricGaussian
from audits.canary import Context, Trial, directions, inclusion, trial
from defenses import metric_dp
from defenses.metric_dp import MetricDPConfig

FEATURES = 64


class MetricDPGame:
    defense = "metric-dp"

    def play(
        self,
        config: MetricDPConfig,
        context: Context,
        mechanism: MetricDPConfig,
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
        first, second = _pair_at_distance(m, rho, generator)
        included = inclusion(m, generator)  # True: the second of the pair is released
        chosen = torch.where(included[:, None], second, first)
        mid, diff = (first + second) / 2, second - first
        scores = torch.zeros(m, dtype=torch.float64)
        for _ in range(releases):
            noisy = metric_dp.perturb(chosen, mechanism.sigma0, generator)
            scores += ((noisy - mid) * diff).sum(1)
        how = f"metric-DP release, {releases} releases, canary pairs at ρ = {rho:.4f}"
        return [trial(scores, included, events, "node", how, rho)]

    def broken(self, config: MetricDPConfig) -> MetricDPConfig:
        return config.model_copy(update={"sigma0": config.sigma0 / 10})


def _pair_at_distance(m: int, rho: float, generator: torch.Generator):
    """m pairs of unit vectors (a, b) with ‖a − b‖ = ρ: b turns a by θ, 2·sin(θ/2) = ρ."""
    a = directions(m, FEATURES, generator)
    w = torch.randn(m, FEATURES, generator=generator, dtype=torch.float64)
    w = w - (w * a).sum(1, keepdim=True) * a
    w = w / w.norm(dim=1, keepdim=True)
    theta = 2 * math.asin(rho / 2)
    return a, math.cos(theta) * a + math.sin(theta) * w
