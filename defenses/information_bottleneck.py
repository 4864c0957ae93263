"""FedGC's information-bottleneck transform (Yan et al., AAAI 2025, Sec. 3.2), as a client-local,
one-shot defense on node features: (A, X, y) → Z, structure unchanged.

Encoder: h = W2·ReLU(W1·x), one symmetric-normalised propagation with self-loops, μ and σ heads
(σ = softplus + 1e-10), one reparameterised sample z = μ + σ·ε. Loss: cross-entropy of a
**shared, frozen** GCN head φ on the client's training labels + γ·KL(N(μ, σ²) ‖ N(0, I)).
The head is built from a public seed (FedGC's code uses a random frozen head, identical across
clients), so every client's Z lands in one space and an adaptive attacker who knows the
recipe can rebuild it. The sampled Z with the best validation accuracy through φ is kept and
standardised per client; it replaces X in everything the client does afterwards.

Decisions (docs/design.md): the KL term is the closed form, not FedGC's one-sample estimate;
only training labels are used (FedGC's federated self-training adds pseudo-labels and its own
leakage); the IB has no formal guarantee, so the report shows the KL term in nats instead of ε."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import NodeClient
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.models import ModelConfig, ModelSpec, sparse
from fgl_workbench.seeding import derive_seed
from fgl_workbench.transcript import SERVER, Transcript, client

IB_HEAD = "ib_head"  # transcript kind: the frozen head the server broadcasts once


class IBConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    gamma: float = Field(5e-4, ge=0.0, description="weight of the KL term (FedGC: 5e-4)")
    epochs: int = Field(100, ge=1, le=10_000, description="full-batch Adam steps per client")
    lr: float = Field(0.002, gt=0.0, le=1.0)
    head_hidden: int = Field(256, ge=1, le=4096, description="hidden width of the frozen head")
    head_seed: int = Field(0, ge=0, description="public seed of the shared frozen head")
    hidden: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="encoder width (W1: d → hidden, W2: hidden → 2d); None: d, as the paper. "
        "A narrower encoder makes wide bag-of-words data (CiteSeer, d = 3703) affordable",
    )


class IBEncoder(nn.Module):
    def __init__(self, dim: int, hidden: int | None = None) -> None:
        super().__init__()
        width = hidden or dim
        self.w1 = nn.Linear(dim, width)
        self.w2 = nn.Linear(width, 2 * dim)
        self.dim = dim

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.w2(F.relu(self.w1(x)))
        # Â built once per graph (not renormalised at every step), as the GCN layers' is
        z = sparse.operator(edge_index, x.size(0), "gcn", h.dtype).times(h)
        return z[:, : self.dim], F.softplus(z[:, self.dim :]) + 1e-10


def kl_to_standard_normal(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, σ²) ‖ N(0, I)) per node, in nats."""
    return 0.5 * (sigma**2 + mu**2 - 1.0 - 2.0 * sigma.log()).sum(1)


def shared_head(cfg: IBConfig, dim: int, num_classes: int) -> nn.Module:
    """The frozen GCN head φ, identical for every client (and any adversary who knows the seed)."""
    with torch.random.fork_rng():
        torch.manual_seed(cfg.head_seed)
        head = ModelSpec(ModelConfig(arch="gcn", hidden=cfg.head_hidden), dim, num_classes, "node")
        model = head.build()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


@dataclass(frozen=True)
class IBResult:
    z: torch.Tensor  # standardised features replacing x
    kl_nats: float  # mean KL per node of the kept sample: the leakage proxy the report shows
    val_accuracy: float  # of the head on the kept Z
    encoder: IBEncoder  # at the kept epoch


def fit_transform(
    data: Data,
    train: torch.Tensor,
    val: torch.Tensor,
    head: nn.Module,
    cfg: IBConfig,
    seed: int,
) -> IBResult:
    """Train one encoder on ``data``'s labelled ``train`` nodes; keep the sampled Z that scores
    best on ``val`` through the head; return it standardised."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        encoder = IBEncoder(data.num_features, cfg.hidden)
        opt = torch.optim.Adam(encoder.parameters(), lr=cfg.lr)
        best: tuple = (-1.0, None, 0.0, None)
        for _ in range(cfg.epochs):
            encoder.train()
            head.train()  # dropout on, as in FedGC's code; the head stays frozen
            mu, sigma = encoder(data.x, data.edge_index)
            z = mu + sigma * torch.randn_like(mu)
            logits = head(z, data.edge_index)
            kl = kl_to_standard_normal(mu, sigma).mean()
            loss = F.cross_entropy(logits[train], data.y[train]) + cfg.gamma * kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            head.eval()
            with torch.no_grad():
                acc = _accuracy(head(z, data.edge_index), data.y, val if val.any() else train)
            if acc > best[0]:
                best = (acc, z.detach().clone(), float(kl.detach()), copy.deepcopy(encoder))
    acc, z, kl, kept = best
    return IBResult(_standardise(z), kl, acc, kept)


def _accuracy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> float:
    return float((logits[mask].argmax(1) == y[mask]).float().mean())


def _standardise(z: torch.Tensor) -> torch.Tensor:
    mean, std = z.mean(0, keepdim=True), z.std(0, unbiased=False, keepdim=True)
    return (z - mean) / torch.where(std > 0, std, torch.ones_like(std))


Labels = Sequence[tuple[torch.Tensor, torch.Tensor]]  # per client: (y, nodes to train on)


def transform_clients(
    clients: Sequence[NodeClient],
    cfg: IBConfig,
    head: nn.Module,
    seed: int,
    labels: Labels | None = None,
) -> tuple[tuple[NodeClient, ...], float]:
    """Every client's data with x replaced by its own Z (trained through the shared ``head``
    on its training labels, or on ``labels``, e.g. with FedGC's pseudo-labels), and the
    node-weighted mean KL (nats)."""
    out, kl, nodes = [], 0.0, 0
    for k, c in enumerate(clients):
        d = c.data
        y, train = labels[k] if labels is not None else (d.y, d.train_mask)
        result = fit_transform(
            d.clone().update({"y": y}),
            train,
            d.val_mask,
            head,
            cfg,
            derive_seed(seed, f"ib/{c.client_id}"),
        )
        out.append(NodeClient(c.client_id, d.clone().update({"x": result.z})))
        kl += result.kl_nats * c.num_nodes
        nodes += c.num_nodes
    return tuple(out), kl / max(nodes, 1)


def bottleneck_clients(
    clients: Sequence[NodeClient],
    cfg: IBConfig,
    dataset: NodeDataset,
    transcript: Transcript,
    seed: int,
    labels: Labels | None = None,
) -> tuple[tuple[NodeClient, ...], float]:
    """The defense as a target runs it: one-shot and local, so only the frozen head travels
    (server → every client, recorded); returns the transformed clients and the mean KL."""
    head = shared_head(cfg, dataset.num_features, dataset.num_classes)
    everyone = [client(k) for k in range(len(clients))]
    transcript.broadcast(0, SERVER, everyone, IB_HEAD, head.state_dict())
    return transform_clients(clients, cfg, head, seed, labels)


def surrogate_features(
    graph: Data,
    aux_ids: np.ndarray,
    aux_labels: np.ndarray,
    cfg: IBConfig,
    num_classes: int,
    seed: int,
) -> torch.Tensor:
    """The adaptive attacker's Z for every node of the population graph: it knows the recipe
    (γ, the head's public seed), so it trains its own encoder with the same loss on the
    subgraph of its labelled auxiliary nodes (half to fit, half to select), then encodes every
    node of the population graph with one sample, as a client does."""
    aux = torch.as_tensor(np.sort(aux_ids))
    y = torch.full((int(graph.num_nodes),), -1, dtype=torch.long)
    y[torch.as_tensor(aux_ids)] = torch.as_tensor(np.asarray(aux_labels, dtype=np.int64))
    edge_index, _ = subgraph(aux, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
    data = Data(x=graph.x[aux], edge_index=edge_index, y=y[aux], num_nodes=aux.numel())
    fit_half = torch.as_tensor(np.random.default_rng(seed).random(aux.numel()) < 0.5)
    head = shared_head(cfg, graph.num_features, num_classes)
    encoder = fit_transform(data, fit_half, ~fit_half, head, cfg, seed).encoder
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(seed)
        mu, sigma = encoder(graph.x, graph.edge_index)
        return _standardise(mu + sigma * torch.randn_like(mu))


class InformationBottleneck:
    name = "information-bottleneck"
    stage = "data"
    Config = IBConfig

    def privacy_unit(self, config: IBConfig) -> PrivacyUnit | None:
        return None  # a KL term, no (ε, δ)


DEFENSES.register("information-bottleneck")(InformationBottleneck())
