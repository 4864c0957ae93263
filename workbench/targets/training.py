"""Local training and evaluation loops shared by targets."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score, roc_auc_score
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from fgl_workbench.data.datasets import GraphDataset
from fgl_workbench.data.federation import Federation, GraphClient, NodeClient


@dataclass(frozen=True)
class TrainingRecipe:
    """How the released model was trained, as an adversary is assumed to know it
    (Kerckhoffs): the target's own ``fit`` with ``config`` on a federation of ``num_clients``
    clients holding ``train_size`` training records in all. The config stops where the
    released model stopped (e.g. FedAvg's best-validation round), so a reference model trained
    with it has seen as many updates as the target. Shadow and reference models are trained by
    running this recipe on records the adversary holds."""

    target: str
    config: dict[str, Any]
    num_clients: int
    train_size: int
    defenses: tuple[Any, ...] = ()  # the AppliedDefenses the target ran with
    # the clients trained on the subgraphs their training nodes induce (the partition's
    # ``membership: inductive``): the runner stamps it, as the federation, not the target's
    # config, decides it. Not called "membership": nothing an attack holds is named so
    inductive: bool = False

    def identity(self) -> str:
        """Stable text the reference pool keys and seeds its models by. Defenses and an
        inductive membership appear only when present, so a recipe without them keeps the
        identity it had before they existed (and the documented attack figures stay
        reproducible)."""
        base = (
            f"TrainingRecipe(target={self.target!r}, config={self.config!r}, "
            f"num_clients={self.num_clients!r}, train_size={self.train_size!r}"
        )
        if self.inductive:
            base += ", membership='inductive'"  # the partition option's words
        return base + (f", defenses={self.defenses!r})" if self.defenses else ")")

    def local_round(self, model: nn.Module, data: Data, seed: int) -> nn.Module:
        """One client's local round from ``model`` (the global model it was sent) on
        ``data``'s training nodes, as the config says: what a server simulates to read the
        uploads it receives (an audit of a federation trained elsewhere replays the user's
        own step instead). ``seed`` is for a replay that draws its own randomness; this one
        uses torch's, as the target's clients do."""
        cfg = self.config
        opt = make_optimizer(cfg["optimizer"], model, cfg["lr"], cfg["weight_decay"])
        train_node_epochs(model, data, opt, cfg["local_epochs"])
        return model


ReleaseRule = Literal["best_val", "last"]


def release_rule(rule: ReleaseRule | None, private: bool) -> ReleaseRule:
    """The rule a target uses: as asked, else the last round when the run is private
    (choosing on validation records would use private data outside the accountant) and the
    best-validation round when it is not."""
    if rule is not None:
        return rule
    return "last" if private else "best_val"


class Release:
    """Chooses the round whose model is released: the best on validation (model selection as
    papers do it), or simply the last (no early stopping, so a long run overfits)."""

    def __init__(self, rule: ReleaseRule) -> None:
        self.rule = rule
        self.val_accuracy = -1.0
        self.round = 0
        self._state: dict | None = None

    def offer(self, round_: int, val_accuracy: float, model: nn.Module) -> None:
        if self.rule == "last":
            self.val_accuracy, self.round = val_accuracy, round_
        elif val_accuracy > self.val_accuracy:
            self.val_accuracy, self.round = val_accuracy, round_
            self._state = copy.deepcopy(model.state_dict())

    def load_into(self, model: nn.Module) -> None:
        if self._state is not None:
            model.load_state_dict(self._state)


_LOSSES: ContextVar[list[torch.Tensor] | None] = ContextVar("training_losses", default=None)


def noted(loss: torch.Tensor) -> torch.Tensor:
    """``loss``, a training step's, kept for ``measuring_losses`` where a caller listens: the
    loss training computes anyway, so measuring it costs no pass and draws nothing."""
    kept = _LOSSES.get()
    if kept is not None:
        kept.append(loss.detach())
    return loss


@contextmanager
def measuring_losses() -> Iterator[list[torch.Tensor]]:
    """The losses of the training steps taken inside (``noted``), e.g. one round's."""
    kept: list[torch.Tensor] = []
    token = _LOSSES.set(kept)
    try:
        yield kept
    finally:
        _LOSSES.reset(token)


def mean_loss(kept: list[torch.Tensor]) -> dict[str, float]:
    """``{"train_loss": mean}`` over the steps kept; nothing where no step noted its loss
    (DP-SGD's per-sample steps, a plug-in's own loop). One device sync, at the end."""
    return {"train_loss": torch.stack(kept).mean().item()} if kept else {}


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
        noted(loss).backward()
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
            noted(F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1))).backward()
            opt.step()


@torch.no_grad()
def node_logits(model: nn.Module, data: Data, dropout: bool = False) -> torch.Tensor:
    """Logits of every node. ``dropout=True`` keeps dropout active, reproducing FedTAD's
    official code, whose evaluation forgets ``training=self.training``."""
    model.train(dropout)
    return model(data.x, data.edge_index)


@torch.no_grad()
def graph_logits(
    model: nn.Module, graphs: list[Data], batch_size: int = 256, dropout: bool = False
) -> torch.Tensor:
    model.train(dropout)
    out = [model(b.x, b.edge_index, b.batch) for b in DataLoader(graphs, batch_size=batch_size)]
    return torch.cat(out) if out else torch.zeros(0)


def utility_scores(
    per_client: Sequence[tuple[np.ndarray, torch.Tensor]], full: bool = True
) -> dict[str, float]:
    """Scores of one model from each client's (true labels, logits).

    Accuracy and macro-F1 are computed per client and averaged with weights equal to each
    client's number of evaluated items; macro-F1 over the classes the client's labels or
    predictions show, and ``macro_f1_all`` over every class of the task. With ``full``, also
    the ROC AUC pooled over all clients' items (binary: positive-class probability;
    multiclass: one-vs-rest macro), the figure graph-level FL papers report; NaN when a class
    is absent from the pooled labels."""
    per_client = [(y, logits) for y, logits in per_client if y.size]  # weight 0 anyway
    if not per_client:
        nan = float("nan")
        return {"accuracy": nan, "macro_f1": nan, "macro_f1_all": nan, "auc": nan}
    sizes = np.array([y.size for y, _ in per_client], dtype=float)
    w = sizes / sizes.sum()
    preds = [logits.argmax(1).numpy(force=True) for _, logits in per_client]
    acc = [float((y == p).mean()) for (y, _), p in zip(per_client, preds, strict=True)]
    out = {"accuracy": float(w @ acc)}
    if full:
        f1 = [
            float(f1_score(y, p, average="macro", zero_division=0))
            for (y, _), p in zip(per_client, preds, strict=True)
        ]
        out["macro_f1"] = float(w @ f1)
        # over every class of the task, absent ones scoring 0 (O-pFGL's and OpenFGL's F1)
        every = np.arange(per_client[0][1].shape[1])
        f1_all = [
            float(f1_score(y, p, labels=every, average="macro", zero_division=0))
            for (y, _), p in zip(per_client, preds, strict=True)
        ]
        out["macro_f1_all"] = float(w @ f1_all)
        out["auc"] = pooled_auc(per_client)
    return out


def pooled_auc(per_client: Sequence[tuple[np.ndarray, torch.Tensor]]) -> float:
    y = np.concatenate([y for y, _ in per_client])
    prob = torch.cat([logits for _, logits in per_client]).softmax(1).numpy(force=True)
    classes = prob.shape[1]
    if np.unique(y).size < classes:
        return float("nan")
    if classes == 2:
        return float(roc_auc_score(y, prob[:, 1]))
    return float(roc_auc_score(y, prob, multi_class="ovr", average="macro"))


def source_aucs(
    models: nn.Module | Mapping[int, nn.Module],
    clients: Sequence[GraphClient],
    dataset: GraphDataset,
) -> dict[str, float]:
    """For a mixture of datasets (``graph-mixture``), each member's test AUC over its own
    classes, the per-dataset columns of cross-dataset papers: the member's test graphs'
    logits restricted to its label range, from one model or each client's own on its own
    graphs. Empty for a single dataset."""
    graphs = [g for c in clients for g in c.test]
    if not dataset.source_names or not graphs:
        return {}
    if isinstance(models, nn.Module):
        logits = graph_logits(models, graphs)
    else:
        logits = torch.cat(
            [graph_logits(models[k], c.test) for k, c in enumerate(clients) if c.test]
        )
    y = np.array([int(g.y.view(-1)[0]) for g in graphs], dtype=np.int64)
    source = np.array([int(getattr(g, "source", 0)) for g in graphs])
    out = {}
    for d, name in enumerate(dataset.source_names):
        classes = np.unique(dataset.labels[dataset.source == d])
        pick = source == d
        if pick.any():
            own = torch.as_tensor(classes)
            out[f"auc/{name}"] = pooled_auc(
                [(np.searchsorted(classes, y[pick]), logits[pick][:, own])]
            )
    return out


def make_optimizer(name: str, model: nn.Module, lr: float, wd: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=wd)
    return torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wd)


def score_node_clients(
    model: nn.Module, clients: Sequence[NodeClient], split: str, dropout: bool = False
) -> dict[str, float]:
    """Scores of one model on every client's ``split`` nodes (its local subgraph)."""
    return score_personalised(dict.fromkeys(range(len(clients)), model), clients, split, dropout)


def score_personalised(
    models: Mapping[int, nn.Module],
    clients: Sequence[NodeClient],
    split: str = "test",
    dropout: bool = False,
) -> dict[str, float]:
    """Each client's own model on its own ``split`` nodes (on its whole local graph)."""
    pairs = []
    for k, c in enumerate(clients):
        mask = c.data[f"{split}_mask"]
        logits = node_logits(models[k], c.data, dropout)[mask]
        pairs.append((c.data.y[mask].numpy(force=True), logits))
    return utility_scores(pairs, full=split == "test")


def score_released(
    api: Any, federation: Federation, hops: int, pooled: bool = False, split: str = "test"
) -> dict[str, float]:
    """Scores of the released deployment (its query API) on every client's ``split`` nodes,
    each answered on its ``hops``-hop subgraph of the population graph, per client as
    ``score_personalised`` weighs them (``pooled``: as one client, as a target trained on
    the pooled clients scores itself): the test utility of an inductive federation, whose
    clients hold no test nodes. With ``hops`` above the model's layers the answer is the
    model's on the whole population graph."""
    labels = federation.dataset.labels
    groups = [getattr(part, split) for part in federation.partition.clients]
    if pooled:
        groups = [np.concatenate(groups)]
    pairs = [(labels[ids], api.logits(ids, hops) if ids.size else torch.zeros(0)) for ids in groups]
    return utility_scores(pairs, full=split == "test")


def score_graph_clients(
    model: nn.Module, clients: Sequence[GraphClient], split: str, dropout: bool = False
) -> dict[str, float]:
    """Scores of one model on every client's ``split`` graphs."""
    models = dict.fromkeys(range(len(clients)), model)
    return score_graph_personalised(models, clients, split, dropout)


def score_graph_personalised(
    models: Mapping[int, nn.Module],
    clients: Sequence[GraphClient],
    split: str = "test",
    dropout: bool = False,
) -> dict[str, float]:
    """Each client's own model on its own ``split`` graphs."""
    pairs = []
    for k, c in enumerate(clients):
        graphs = getattr(c, split)
        y = np.array([int(g.y.view(-1)[0]) for g in graphs], dtype=np.int64)
        pairs.append((y, graph_logits(models[k], graphs, dropout=dropout)))
    return utility_scores(pairs, full=split == "test")
