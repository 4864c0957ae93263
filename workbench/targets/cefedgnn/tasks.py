"""What a CE-FedGNN client learns: its nodes' labels, or the labels of the edges it sees (the
paper's AML transactions; its Eq. 3 edge head). Both run through the same moving-average
estimators (``propagation``); they differ in the minibatch, the loss and what is scored.

Edge task: a client's edges are the labelled edges with an own endpoint; an edge between two
clients is in both clients' sets, each back-propagating through its own endpoint only, the
other's embedding the stale release h^(L) (Eq. 8), and each copy weighs ½ in the loss so that
the clients' average gradient counts it once (the paper's "equal sampling probabilities").
Edge representation (Eq. 3): h(e) = φ(W_e [(h(u) + h(v)) / 2 ; a_e]) with the edge attributes
a_e both clients see, then a linear classifier. Classes are weighted by the inverse of their
training frequency (illicit transfers are a few percent); the score is the illicit class's F1
averaged over clients, as the paper reports."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch import nn

from fgl_workbench.data.datasets import EdgeTask
from fgl_workbench.targets.cefedgnn.halo import HaloClient
from fgl_workbench.targets.cefedgnn.propagation import Estimators, estimated_logits
from fgl_workbench.targets.training import utility_scores

SPLITS = {"train": 0, "val": 1, "test": 2}


@dataclass(frozen=True)
class Halo:
    """Released hidden states and final embeddings (edge task) of halo nodes, in the client's
    halo order (or the server's buffer of them, over global ids); ``degree``: of every local
    node (or, in the buffer, as released)."""

    hidden: torch.Tensor
    output: torch.Tensor
    degree: torch.Tensor


class EdgeHead(nn.Module):
    def __init__(self, hidden: int, attributes: int, classes: int) -> None:
        super().__init__()
        self.edge = nn.Linear(hidden + attributes, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, hu: torch.Tensor, hv: torch.Tensor, attr: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.edge(torch.cat([(hu + hv) / 2, attr], 1))))


class EdgeModel(nn.Module):
    """The node GNN (its output: node embeddings h^(L)) and the edge head, trained and
    averaged as one model."""

    def __init__(self, gnn: nn.Module, head: EdgeHead) -> None:
        super().__init__()
        self.gnn, self.head = gnn, head


@dataclass(frozen=True)
class ClientEdges:
    """A client's labelled edges in its local ids (own or halo endpoints)."""

    src: torch.Tensor
    dst: torch.Tensor
    attr: torch.Tensor
    y: torch.Tensor
    split: torch.Tensor
    weight: torch.Tensor  # 1 for an edge inside the client, ½ for one with a halo endpoint


def client_edges(task: EdgeTask, c: HaloClient, num_items: int) -> ClientEdges:
    local = torch.full((num_items,), -1, dtype=torch.long)
    local[c.data.global_id] = torch.arange(c.num_nodes)
    s, d = local[task.index[0]], local[task.index[1]]
    keep = (s >= 0) & (d >= 0) & ((s < c.num_own) | (d < c.num_own))
    s, d = s[keep], d[keep]
    inside = (s < c.num_own) & (d < c.num_own)
    weight = torch.where(inside, 1.0, 0.5)
    return ClientEdges(s, d, task.attr[keep], task.y[keep], task.split[keep], weight)


def class_weights(edges: list[ClientEdges], classes: int) -> torch.Tensor:
    """Inverse training frequency, normalised to mean 1 (a statistic every client could
    share; ours is computed over the federation's training edges)."""
    y = torch.cat([e.y[e.split == 0] for e in edges])
    counts = torch.bincount(y, minlength=classes).clamp(min=1).float()
    w = counts.sum() / counts
    return w / w.mean()


def edge_batch_loss(
    model: EdgeModel,
    c: HaloClient,
    edges: ClientEdges,
    est: Estimators,
    halo: Halo,
    batch: torch.Tensor,
    weights: torch.Tensor,
    gamma: float,
    fanout: int | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """The weighted cross-entropy of ``batch`` (indices into the client's edges)."""
    src, dst = edges.src[batch], edges.dst[batch]
    ends = torch.cat([src, dst])
    seeds = torch.unique(ends[ends < c.num_own])
    logits = edge_logits(
        model, c, est, halo, src, dst, edges.attr[batch], seeds, gamma, fanout, generator
    )
    loss = F.cross_entropy(logits, edges.y[batch], weight=weights, reduction="none")
    return (loss * edges.weight[batch]).sum() / edges.weight[batch].sum()


def edge_logits(
    model: EdgeModel,
    c: HaloClient,
    est: Estimators,
    halo: Halo,
    src: torch.Tensor,
    dst: torch.Tensor,
    attr: torch.Tensor,
    seeds: torch.Tensor,
    gamma: float,
    fanout: int | None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Own endpoints' h^(L) through the estimators (``seeds``: those of the batch), halo
    endpoints' as released (constants: no gradient into another client's embedding)."""
    fresh = torch.relu(
        estimated_logits(
            model.gnn, c, est, halo.hidden, halo.degree, seeds, gamma, fanout, generator
        )
    )
    table = torch.cat([torch.zeros(c.num_own, fresh.shape[1]), halo.output.detach()])
    table = table.index_put((seeds,), fresh)
    return model.head(table[src], table[dst], attr)


def edge_predictions(
    model: EdgeModel, c: HaloClient, edges: ClientEdges, halo: Halo, split: str
) -> tuple[np.ndarray, torch.Tensor] | None:
    """The client's (labels, logits) on its edges of ``split``, with full neighbourhoods."""
    pick = edges.split == SPLITS[split]
    if not pick.any():
        return None
    classes = model.gnn.convs[-1].out_channels
    scratch = Estimators.zeros(c.num_own, halo.hidden.shape[1], classes)
    logits = edge_logits(
        model,
        c,
        scratch,
        halo,
        edges.src[pick],
        edges.dst[pick],
        edges.attr[pick],
        torch.arange(c.num_own),
        1.0,
        None,
    )
    return edges.y[pick].numpy(force=True), logits


def edge_scores(per_client: list[tuple[np.ndarray, torch.Tensor]]) -> dict[str, float]:
    """The usual scores, and the positive (illicit) class's F1 averaged over clients weighted
    by their number of edges."""
    out = utility_scores(per_client)
    sizes = np.array([y.size for y, _ in per_client], dtype=float)
    f1 = [float(f1_score(y, p.argmax(1).numpy(force=True), zero_division=0)) for y, p in per_client]
    out["f1_illicit"] = float(sizes @ np.array(f1) / sizes.sum()) if sizes.size else float("nan")
    return out
