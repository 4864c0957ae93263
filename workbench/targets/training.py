"""Local training and evaluation loops shared by targets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader


def train_node_epochs(
    model: nn.Module, data: Data, opt: torch.optim.Optimizer, epochs: int
) -> None:
    """Full-batch cross-entropy on the client's training nodes."""
    model.train()
    for _ in range(epochs):
        opt.zero_grad()
        loss = F.cross_entropy(
            model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]
        )
        loss.backward()
        opt.step()


def train_graph_epochs(
    model: nn.Module,
    graphs: list[Data],
    opt: torch.optim.Optimizer,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
) -> None:
    model.train()
    loader = DataLoader(graphs, batch_size=batch_size, shuffle=True, generator=generator)
    for _ in range(epochs):
        for b in loader:
            opt.zero_grad()
            F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1)).backward()
            opt.step()


@torch.no_grad()
def node_logits(model: nn.Module, data: Data) -> torch.Tensor:
    model.eval()
    return model(data.x, data.edge_index)


@torch.no_grad()
def graph_logits(model: nn.Module, graphs: list[Data], batch_size: int = 256) -> torch.Tensor:
    model.eval()
    out = [model(b.x, b.edge_index, b.batch) for b in DataLoader(graphs, batch_size=batch_size)]
    return torch.cat(out) if out else torch.zeros(0)


def weighted_scores(
    per_client: Sequence[tuple[np.ndarray, np.ndarray]], macro_f1: bool = True
) -> dict[str, float]:
    """Accuracy (and macro-F1) per client from (true labels, predictions), averaged with
    weights equal to each client's number of evaluated items."""
    sizes = np.array([y.size for y, _ in per_client], dtype=float)
    if sizes.sum() == 0:
        return {"accuracy": float("nan"), "macro_f1": float("nan")}
    w = sizes / sizes.sum()
    acc = [float((y == p).mean()) if y.size else 0.0 for y, p in per_client]
    out = {"accuracy": float(w @ acc)}
    if macro_f1:
        f1 = [
            float(f1_score(y, p, average="macro", zero_division=0)) if y.size else 0.0
            for y, p in per_client
        ]
        out["macro_f1"] = float(w @ f1)
    return out


def make_optimizer(name: str, model: nn.Module, lr: float, wd: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    return torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wd)
