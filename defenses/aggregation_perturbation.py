"""Aggregation perturbation (GAP, Sajadmanesh et al., USENIX Security 2023): the only place a
GAP model reads edges is a sum over neighbours of unit-norm embeddings, perturbed with Gaussian
noise once per hop. Every row of the input has norm ≤ 1, so

- **edge level** (neighbouring graphs differ in one undirected edge, i.e. two directed entries):
  each hop's sum changes in two rows by at most 1 each, L2 sensitivity √2 (GAP's code uses 1
  for a single directed edge; we protect the undirected edge);
- **node level** (neighbouring graphs differ in one node with its features, label and edges):
  out-degrees are first bounded by ``max_degree`` D (random edges kept per source node), so
  removing a node changes at most D rows of each hop's sum by at most 1, sensitivity √D. The
  node's own row belongs to its own record, which DP-SGD on the MLP modules protects; node
  level therefore needs ``dp-sgd`` as well (the target refuses otherwise).

The aggregates are computed once (training on each client's subgraph, inference once on the
population graph), so each is ``hops`` Gaussian mechanisms: Gaussian(σ·Δ, Δ, hops) twice.

``target_epsilon`` (instead of ``noise_multiplier``, ``fgl_workbench.running.calibration``): σ is
the smallest whose ledger meets the target against everyone, exactly (hops are fixed); at node level
the ε is that of both events and DP-SGD's, whose σ stays as written (only one of the two defenses
may be calibrated)."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import ConfigDict, Field

from fgl_workbench.accountants import ADVERSARIES, Gaussian, Scope
from fgl_workbench.defenses import metric_dp, noise
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.defenses.calibration import NoiseOrEpsilon, target_epsilon_field


class APConfig(NoiseOrEpsilon):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / sensitivity")
    target_epsilon: float | None = target_epsilon_field()
    level: Literal["edge", "node"] = "edge"
    max_degree: int = Field(50, ge=1, description="node level: out-degree bound D")

    @property
    def sensitivity(self) -> float:
        return float(self.max_degree) ** 0.5 if self.level == "node" else 2.0**0.5


def bound_out_degree(edge_index: torch.Tensor, max_degree: int, generator: torch.Generator):
    """At most ``max_degree`` outgoing edges per source node, chosen uniformly at random."""
    if edge_index.numel() == 0:
        return edge_index
    order = torch.randperm(edge_index.size(1), generator=generator)
    src = edge_index[0, order]
    by_src = torch.argsort(src, stable=True)  # random order within each source
    src_sorted = src[by_src]
    starts = torch.searchsorted(src_sorted, src_sorted, right=False)
    rank = torch.arange(src_sorted.numel()) - starts
    keep = order[by_src[rank < max_degree]]
    return edge_index[:, torch.sort(keep).values]


def perturbed_hops(
    x0: torch.Tensor,
    edge_index: torch.Tensor,
    hops: int,
    cfg: APConfig | None,
    generator: torch.Generator,
) -> list[torch.Tensor]:
    """[x0, x1, ..., x_hops]: x_k = normalise(Σ_{v→u} x_{k−1}[v] + N(0, (σΔ)²)). Without a
    config the sums are exact (the non-private GAP baseline)."""
    out = [metric_dp.normalise(x0)]
    for _ in range(hops):
        agg = neighbour_sum(out[-1], edge_index)
        if cfg is not None:
            std = cfg.noise_multiplier * cfg.sensitivity
            agg = agg + noise.gaussian(agg.shape, std, generator, agg.dtype)
        out.append(metric_dp.normalise(agg))
    return out


def neighbour_sum(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """Row u: Σ over edges v → u of x[v]."""
    out = torch.zeros_like(x)
    return out.index_add_(0, edge_index[1], x[edge_index[0]])


def ledger_events(cfg: APConfig, hops: int) -> tuple[Gaussian, Gaussian]:
    """Training aggregates and the inference aggregates: hops mechanisms each, against
    everyone (every model and answer is post-processing of the noisy aggregates)."""
    what = "one undirected edge" if cfg.level == "edge" else "one node with its edges"
    scope = Scope(cfg.level, f"add or remove {what}", ADVERSARIES)
    event = Gaussian(cfg.noise_multiplier * cfg.sensitivity, cfg.sensitivity, hops, scope=scope)
    return event, event


class AggregationPerturbation:
    name = "aggregation-perturbation"
    stage = "message_passing"
    Config = APConfig

    def privacy_unit(self, config: APConfig) -> PrivacyUnit | None:
        return config.level


DEFENSES.register("aggregation-perturbation")(AggregationPerturbation())
