"""CE-FedGNN's local forward pass (Eq. 5) on a client's halo graph, written on the layers of the
workbench's 2-layer NodeGNN (GraphSAGE-mean or GCN), so the weights a client trains are the
released model's, and a pass over full neighbourhoods with γ = 1 is that model's forward.

Per local step, on a minibatch of seed nodes:
- each seed's neighbours are thinned to about ``fanout`` (each kept with probability
  min(1, fanout / degree); GCN terms are reweighted by 1/p, GraphSAGE takes the mean of those
  kept), and so are those of every own node the seeds aggregate from;
- layer 1 aggregates *own* neighbours only: a halo node's features never leave its owner;
- layer 2 aggregates own nodes' fresh hidden states and halo nodes' released ones (constants:
  no gradient flows into another client's embedding);
- each layer's pre-activation of the nodes computed is the moving average
  H̃ ← (1 − γ)·H̃_old + γ·fresh, the old value detached (GNNAutoScale-style), so gradients
  flow through the fresh term only; the estimators persist across steps and rounds."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch_geometric.nn import GCNConv

from fgl_workbench.models.functional import dropout
from fgl_workbench.targets.cefedgnn.halo import HaloClient


@dataclass
class Estimators:
    """A client's moving-average pre-activations H̃^(l) of its own nodes (Eq. 5)."""

    hidden: torch.Tensor  # [own, hidden]
    output: torch.Tensor  # [own, classes]
    touched: torch.Tensor  # [own] bool: hidden estimator updated since the last release

    @classmethod
    def zeros(cls, num_own: int, hidden: int, classes: int) -> Estimators:
        return cls(
            torch.zeros(num_own, hidden),
            torch.zeros(num_own, classes),
            torch.zeros(num_own, dtype=torch.bool),
        )


def coefficients(
    targets: torch.Tensor,
    client: HaloClient,
    degree: torch.Tensor,
    gcn: bool,
    own_only: bool,
    fanout: int | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Sparse [len(targets), nodes]: row i aggregates target i's (thinned) neighbourhood.
    ``degree``: every local node's degree in the whole graph (halo nodes': as released)."""
    src, dst = client.data.edge_index  # messages flow src → dst
    row_of = torch.full((client.num_nodes,), -1, dtype=torch.long)
    row_of[targets] = torch.arange(targets.numel())
    keep = row_of[dst] >= 0
    if own_only:
        keep &= src < client.num_own
    src, dst = src[keep], dst[keep]
    p = torch.ones(src.numel())
    if fanout is not None:
        p = (fanout / degree[dst].clamp(min=1).float()).clamp(max=1.0)
        kept = torch.rand(src.numel(), generator=generator) < p
        src, dst, p = src[kept], dst[kept], p[kept]
    rows = row_of[dst]
    if gcn:  # Σ_u (d̃_v d̃_u)^-1/2 h_u over N(v) ∪ {v}, thinned terms reweighted by 1/p
        d = degree.float() + 1.0
        value = (d[dst] * d[src]).rsqrt() / p
        rows = torch.cat([rows, torch.arange(targets.numel())])
        src = torch.cat([src, targets])
        value = torch.cat([value, 1.0 / d[targets]])
    else:  # the mean over the neighbours kept
        count = torch.bincount(rows, minlength=targets.numel()).clamp(min=1).float()
        value = 1.0 / count[rows]
    shape = (targets.numel(), client.num_nodes)
    index = torch.stack([rows, src])
    return torch.sparse_coo_tensor(index, value, shape, check_invariants=False).coalesce()


def layer(conv: nn.Module, aggregated: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """The conv's pre-activation from the aggregated neighbourhood (and, for GraphSAGE, the
    node's own state): GCN W·Σ + b; SAGE W_l·mean + W_r·h_v."""
    if isinstance(conv, GCNConv):
        return conv.lin(aggregated) + conv.bias
    return conv.lin_l(aggregated) + conv.lin_r(own)


def estimated_logits(
    model: nn.Module,
    client: HaloClient,
    estimators: Estimators,
    halo_hidden: torch.Tensor,
    degree: torch.Tensor,
    seeds: torch.Tensor,
    gamma: float,
    fanout: int | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Logits of own ``seeds`` (local ids) through the estimators, which it updates.
    ``halo_hidden``: [halo, hidden], the halo nodes' released hidden states (constants)."""
    conv1, conv2 = model.convs
    gcn = isinstance(conv1, GCNConv)
    x, n_own = client.data.x, client.num_own
    agg2 = coefficients(seeds, client, degree, gcn, False, fanout, generator)
    need = torch.unique(torch.cat([agg2.indices()[1], seeds]))
    own = need[need < n_own]
    agg1 = coefficients(own, client, degree, gcn, True, fanout, generator)
    fresh1 = layer(conv1, torch.sparse.mm(agg1, x), x[own])
    pre1 = (1 - gamma) * estimators.hidden[own] + gamma * fresh1
    h = torch.cat([torch.zeros(n_own, pre1.shape[1]), halo_hidden.detach()])
    h = h.index_put((own,), torch.relu(pre1))
    h = dropout(h, model.dropout, model.training)
    fresh2 = layer(conv2, torch.sparse.mm(agg2, h), h[seeds])
    pre2 = (1 - gamma) * estimators.output[seeds] + gamma * fresh2
    estimators.hidden[own] = pre1.detach()
    estimators.output[seeds] = pre2.detach()
    estimators.touched[own] = True
    return pre2
