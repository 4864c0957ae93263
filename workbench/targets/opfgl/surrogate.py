"""O-pFGL's global surrogate graph (Eq. 9-11, after SimGC): learnable node features X' and an
MLP link predictor fitted so that each class's propagated surrogate features match the pooled
class statistics.

Â' is GCN's weighted normalisation of the predicted adjacency, H' = [X' ‖ Â'X' ‖ …]. The loss
is α_aln·Σ_c r_c·(MSE(μ'_c, μ_c) + [n'_c > 1]·MSE(σ'_c, σ_c)) + α_smt·L_smt, with r_c the
class's share of the pooled counts. The smoothness term is the official code's (and SimGC's):
Σ A'_ij·mean_l exp(−(x'_il − x'_jl)²/2) / Σ A'_ij, which *penalises* strong links between
similar nodes; ``smoothness: attract`` flips it into the usual smoothness prior. Φ and X'
are updated alternately: of every 50 iterations, the first 10 step Φ and the other 40 X'.
The link predictor is FedGC's edge MLP; its BatchNorm stays in training mode, as in the code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.fedgc.condensation import EdgeGenerator, normalised_dense
from fgl_workbench.targets.opfgl.statistics import Pooled


class SurrogateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    nodes_per_class: int = Field(1, ge=1, le=300, description="n'_c (the paper's Cora/CiteSeer)")
    rate: float | None = Field(
        None, gt=0.0, le=1.0, description="n'_c = ⌈rate · original labelled count⌉ instead"
    )
    max_nodes: int = Field(300, ge=1, le=300, description="the paper's cap")
    iterations: int = Field(3000, ge=1, le=100_000)
    lr_features: float = Field(5e-3, gt=0.0)
    lr_links: float = Field(1e-3, gt=0.0)
    hidden: int = Field(128, ge=1, le=4096, description="link predictor width")
    threshold: float = Field(0.01, ge=0.0, lt=1.0, description="ε: weaker links are dropped")
    align_weight: float = Field(10.0, ge=0.0)
    smooth_weight: float = Field(0.1, ge=0.0)
    smoothness: Literal["code", "attract"] = "code"


def links(phi: EdgeGenerator, x: torch.Tensor, threshold: float) -> torch.Tensor:
    """A' from the link predictor Φ (FedGC's edge MLP, GCOND's PGE), weaker links than ε
    dropped."""
    adj = phi(x)
    return adj * (adj >= threshold)


def propagate_dense(x: torch.Tensor, adj: torch.Tensor, hops: int) -> torch.Tensor:
    """[X ‖ ÂX ‖ … ‖ Â^hops X] with Â = D̃^-1/2 (A + I) D̃^-1/2 on a weighted dense A."""
    norm = normalised_dense(adj)
    blocks = [x]
    for _ in range(hops):
        blocks.append(norm @ blocks[-1])
    return torch.cat(blocks, 1)


def surrogate_sizes(counts: np.ndarray, original: np.ndarray, cfg: SurrogateConfig) -> np.ndarray:
    """n'_c for every class (classes nobody reported get nodes too, but no alignment)."""
    if cfg.rate is None:
        sizes = np.full(counts.size, cfg.nodes_per_class)
    else:
        sizes = np.maximum(1, np.ceil(cfg.rate * original)).astype(np.int64)
    while sizes.sum() > cfg.max_nodes and sizes.max() > 1:
        sizes[sizes.argmax()] -= 1
    if sizes.sum() > cfg.max_nodes:
        raise ConfigError(
            f"surrogate.max_nodes: {counts.size} classes need at least one node each "
            f"(got {cfg.max_nodes})"
        )
    return sizes


@dataclass(frozen=True)
class SurrogateGraph:
    x: torch.Tensor  # [n', d]
    edge_index: torch.Tensor
    edge_weight: torch.Tensor
    y: torch.Tensor  # [n']
    alignment: float  # the final alignment loss (the fit to the pooled statistics)

    def as_payload(self) -> dict[str, torch.Tensor]:
        return {
            "x": self.x,
            "edge_index": self.edge_index,
            "edge_weight": self.edge_weight,
            "y": self.y,
        }

    @classmethod
    def from_payload(cls, p: dict[str, torch.Tensor]) -> SurrogateGraph:
        return cls(p["x"], p["edge_index"], p["edge_weight"], p["y"], float("nan"))


def alignment_loss(
    h: torch.Tensor, y: torch.Tensor, target: Pooled, weights: torch.Tensor
) -> torch.Tensor:
    loss = h.new_zeros(())
    mean, std = torch.as_tensor(target.means).float(), torch.as_tensor(target.variances).float()
    std = std.sqrt()
    for c in torch.nonzero(weights > 0).view(-1).tolist():
        rows = h[y == c]
        term = ((rows.mean(0) - mean[c]) ** 2).mean()
        if rows.shape[0] > 1:
            term = term + ((rows.std(0) - std[c]) ** 2).mean()
        loss = loss + weights[c] * term
    return loss


def smoothness_loss(x: torch.Tensor, adj: torch.Tensor, sign: str) -> torch.Tensor:
    similar = torch.exp(-((x[:, None, :] - x[None, :, :]) ** 2) / 2).mean(2)
    total = adj.sum().clamp(min=1e-12)
    loss = (adj * similar).sum() / total
    return loss if sign == "code" else -loss


def build_surrogate(
    target: Pooled,
    original_counts: np.ndarray,
    features: int,
    hops: int,
    cfg: SurrogateConfig,
    generator: torch.Generator,
) -> SurrogateGraph:
    """Fit X' and Φ to the pooled statistics (seeded by ``generator``: every party that runs
    it on the same statistics gets the same graph)."""
    sizes = surrogate_sizes(target.counts, original_counts, cfg)
    y = torch.repeat_interleave(torch.arange(sizes.size), torch.as_tensor(sizes))
    x = nn.Parameter(torch.randn(int(sizes.sum()), features, generator=generator))
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
        phi = EdgeGenerator(features, cfg.hidden)
    phi.train()  # BatchNorm in training mode throughout, as the code
    counts = torch.as_tensor(target.counts).float()
    weights = counts / counts.sum().clamp(min=1)
    opt_x = torch.optim.Adam([x], lr=cfg.lr_features)
    opt_phi = torch.optim.Adam(phi.parameters(), lr=cfg.lr_links)
    for it in range(cfg.iterations):
        opt = opt_phi if it % 50 < 10 else opt_x  # Φ for 10 iterations of every 50
        opt.zero_grad()
        adj = links(phi, x, cfg.threshold)
        h = propagate_dense(x, adj, hops)
        align = alignment_loss(h, y, target, weights)
        loss = cfg.align_weight * align + cfg.smooth_weight * smoothness_loss(
            x, adj, cfg.smoothness
        )
        loss.backward()
        opt.step()
    with torch.no_grad():
        adj = links(phi, x, cfg.threshold)
        final = alignment_loss(propagate_dense(x, adj, hops), y, target, weights)
    edge_index = adj.nonzero().T
    return SurrogateGraph(
        x.detach().clone(),
        edge_index,
        adj[edge_index[0], edge_index[1]].detach(),
        y,
        float(final),
    )
