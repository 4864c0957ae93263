"""Denoising score matching on adjacency matrices and annealed Langevin sampling (EDP-GNN, as
CeFGC uses it; the paper's Eqs. 2, 4, 5 and 9).

Noise is Gaussian on the upper triangle, mirrored, so a noisy adjacency stays symmetric;
padded nodes and the diagonal get none. The score target is ∇ log q_σ(Â | A) = −(Â − A)/σ²
(the paper's Eq. 5 prints the opposite sign; the reference code has this one). The loss is
(1/2L) Σ_l σ_l² E‖s_θ(Â_l, σ_l) + (Â_l − A)/σ_l²‖², summed over a graph's pairs and averaged
over graphs. Sampling starts from a folded normal |ε| and anneals from the largest σ to the
smallest, T steps each with step α_l = r σ_l²: Â ← Â + √(2α_l)·η·ξ, then Â ← Â + α_l s_θ(Â, σ_l)
(the reference code's order), and thresholds at ½."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fgl_workbench.targets.cefgc.score_network import pair_mask

# the paper's noise levels (EDP-GNN's ego/com_small configuration)
SIGMAS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.6)

Score = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def symmetric_noise(
    shape: tuple[int, ...], mask: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Standard normal on the upper triangle of real pairs, mirrored: [B, N, N]."""
    z = torch.randn(shape, generator=generator).triu(1)
    return (z + z.transpose(-1, -2)) * pair_mask(mask)


def dsm_loss(
    score: Score,
    adj: torch.Tensor,
    x: torch.Tensor,
    mask: torch.Tensor,
    sigmas: Sequence[float],
    generator: torch.Generator | None = None,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 5, every graph of the batch perturbed at every level (one forward pass).
    ``scale`` [B]: each graph's levels are σ_l·scale (CeFGC*'s per-class schedule, Eq. 8)."""
    levels = len(sigmas)
    b = adj.shape[0]
    level = torch.arange(levels).repeat_interleave(b)
    per_graph_scale = torch.ones(b, dtype=adj.dtype) if scale is None else scale.to(adj.dtype)
    sigma = torch.tensor(sigmas, dtype=adj.dtype)[level] * per_graph_scale.repeat(levels)
    sigma = sigma.view(-1, 1, 1)
    a, xs, m = adj.repeat(levels, 1, 1), x.repeat(levels, 1, 1), mask.repeat(levels, 1)
    noise = symmetric_noise(tuple(a.shape), m, generator) * sigma
    target = -noise / sigma**2
    err = (score(a + noise, xs, m, level) - target) * pair_mask(m)
    per_graph = 0.5 * sigma.view(-1) ** 2 * (err**2).sum((1, 2))
    return per_graph.view(levels, b).mean(1).mean()


@torch.no_grad()
def langevin_sample(
    score: Score,
    x: torch.Tensor,
    mask: torch.Tensor,
    sigmas: Sequence[float],
    steps: int = 100,
    step_ratio: float = 0.01,
    temperature: float = 0.5,
    generator: torch.Generator | None = None,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Binary symmetric adjacencies [B, N, N] for the node sets ``mask`` (features ``x``),
    annealed from the largest level to the smallest (levels indexed as ``sigmas``; each
    graph's σ_l times ``scale`` [B], if given)."""
    shape = tuple(mask.shape) + (mask.shape[1],)
    a = symmetric_noise(shape, mask, generator).abs()
    order = sorted(range(len(sigmas)), key=lambda i: -sigmas[i])
    per_graph = torch.ones(shape[0]) if scale is None else scale.float()
    for i in order:
        alpha = (step_ratio * (sigmas[i] * per_graph) ** 2).view(-1, 1, 1)
        level = torch.full((mask.shape[0],), i, dtype=torch.long)
        for _ in range(steps):
            a = a + (2 * alpha) ** 0.5 * temperature * symmetric_noise(shape, mask, generator)
            a = a + alpha * score(a, x, mask, level)
    return (a > 0.5).to(a.dtype) * pair_mask(mask)
