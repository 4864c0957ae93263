"""K node-level models of one recipe trained together, as LiRA's, RMIA's and the shadow
attack's reference models are.

Reference models differ only in their training records and seeds: each is FedAvg (or the
centralised schedule) on the same client subgraphs, with other training masks. Trained one at
a time, a Cora reference is thousands of small sparse products, each dominated by call
overhead. Here the K models' weights are stacked ([in, K, out]) and each layer is one batched
product plus one sparse aggregation over the shared graph with the K models side by side in
the feature dimension, so one step trains all K.

The loop reproduces the sequential ``fit`` of ``fedavg`` (node level) and ``centralized``
step for step: each model is initialised exactly as its own ``fit`` would (same seeding,
same draws), its dropout masks come from a generator holding the state its own run would
have, in the same order, Adam's update is elementwise, and the aggregation weights are the
same. What differs is only float rounding in the batched products (tested: the models agree
with one-at-a-time training within float tolerance). Recipes outside that shape (defenses,
client sampling, GAT, graph level, scored releases) return None and train one at a time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from fgl_workbench.data.datasets import Dataset, NodeDataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import Partition
from fgl_workbench.models import ModelSpec
from fgl_workbench.models.sparse import SparseRows, operator
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.centralized import CentralizedConfig, pooled_client
from fgl_workbench.targets.fedavg import FedAvgConfig
from fgl_workbench.targets.training import TrainingRecipe

ARCHS = ("gcn", "sage", "mlp")
SPARSE_BELOW = 0.1  # feature density under which the first layer multiplies sparse rows


@dataclass(frozen=True)
class Schedule:
    """What the sequential ``fit`` does, reduced to what the batched loop needs."""

    seed_label: str  # the label ``fit`` derives its torch seed with
    local_models: bool  # FedAvg builds one model per client after the global one
    rounds: int
    local_epochs: int
    optimizer: str
    lr: float
    weight_decay: float
    persistent_optimizer: bool


def schedule_of(recipe: TrainingRecipe) -> Schedule | None:
    """The recipe's schedule, or None when the batched loop cannot reproduce it."""
    if recipe.defenses:
        return None
    if recipe.target == "fedavg":
        cfg = FedAvgConfig(**recipe.config)
        if cfg.client_fraction != 1.0 or cfg.eval_dropout or cfg.release != "last":
            return None
        if cfg.fine_tune is not None or cfg.keep_local:  # personalised models: not this loop
            return None
        return Schedule(
            "fedavg",
            True,
            cfg.rounds,
            cfg.local_epochs,
            cfg.optimizer,
            cfg.lr,
            cfg.weight_decay,
            cfg.persistent_optimizer,
        )
    if recipe.target == "centralized":
        cfg = CentralizedConfig(**recipe.config)
        if cfg.release != "last" or cfg.inductive:  # inductive: each model its own graph
            return None
        # one client, one epoch per round, the optimizer kept: one model trained throughout
        return Schedule(
            "centralized", False, cfg.epochs, 1, cfg.optimizer, cfg.lr, cfg.weight_decay, True
        )
    return None


def train_batched(
    recipe: TrainingRecipe,
    spec: ModelSpec,
    dataset: Dataset,
    partitions: Sequence[Partition],
    seeds: Sequence[int],
) -> list[dict[str, torch.Tensor]] | None:
    """The released weights of ``fit(federation_k, recipe, seed_k)`` for every k, trained
    together; None when this recipe or these federations are not of the batched shape."""
    shared = batchable(recipe, spec, dataset, partitions)
    return None if shared is None else train_shared(recipe, spec, shared, seeds)


def train_shared(
    recipe: TrainingRecipe, spec: ModelSpec, shared: SharedClients, seeds: Sequence[int]
) -> list[dict[str, torch.Tensor]]:
    """``train_batched`` on what ``batchable`` found the models share."""
    schedule = schedule_of(recipe)
    assert schedule is not None, "batchable admits only recipes with a schedule"
    arch = spec.config.arch or "gcn"
    models, generators = _initial(spec, schedule, seeds, len(shared.graphs))
    net = StackedNet(arch, models, spec.config.dropout)
    graphs = [ClientGraph.of(g, m, arch) for g, m in zip(shared.graphs, shared.masks, strict=True)]
    net.train(graphs, schedule, generators)
    return net.states(models[0])


@dataclass(frozen=True)
class SharedClients:
    """The client subgraphs every model's federation holds, and each model's training masks
    on them ([K, n] per client)."""

    graphs: list[Data]
    masks: list[torch.Tensor]


def batchable(
    recipe: TrainingRecipe, spec: ModelSpec, dataset: Dataset, partitions: Sequence[Partition]
) -> SharedClients | None:
    """What the models share when the batched loop can train them (checked before anything
    is trained), else None: their clients must hold the same nodes, only the training records
    may differ."""
    if schedule_of(recipe) is None:
        return None  # not a recipe this loop reproduces (GAP's spec has no ``config``)
    arch = spec.config.arch or "gcn"
    # one layer: the models drop out their input features, which this loop does not draw
    one_layer = (spec.config.layers or 2) == 1 and spec.config.dropout > 0
    if arch not in ARCHS or one_layer:
        return None
    if not isinstance(dataset, NodeDataset):
        return None
    if any(p.membership == "inductive" for p in partitions):
        return None  # each model trains on the graph its own members induce
    pooled = recipe.target == "centralized"  # one client holding every record
    ids, trains = [], []
    for p in partitions:
        if pooled:
            ids.append([np.sort(np.concatenate([c.ids for c in p.clients]))])
            trains.append([np.concatenate([c.train for c in p.clients])])
        else:
            ids.append([c.ids for c in p.clients])
            trains.append([c.train for c in p.clients])
    if not all(_same_nodes(ids[0], other) for other in ids[1:]):
        return None  # the models' clients hold different subgraphs: nothing to share
    federation = build_federation(dataset, partitions[0])
    graphs = [pooled_client(federation).data] if pooled else [c.data for c in federation.clients]
    masks = [
        torch.as_tensor(np.stack([np.isin(ids[0][c], t[c]) for t in trains]))
        for c in range(len(graphs))
    ]
    return SharedClients(graphs, masks)


def _same_nodes(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _initial(
    spec: ModelSpec, schedule: Schedule, seeds: Sequence[int], num_clients: int
) -> tuple[list[torch.nn.Module], list[torch.Generator]]:
    """Each model built as its own ``fit`` builds it, and a generator in the state the global
    stream would be in after that (the stream its dropout masks are drawn from)."""
    models, generators = [], []
    for seed in seeds:
        seed_everything(derive_seed(seed, schedule.seed_label))
        models.append(spec.build())
        if schedule.local_models:
            for _ in range(num_clients):
                spec.build()
        generators.append(_global_stream())
    return models, generators


def _global_stream() -> torch.Generator:
    """A generator in the state of the default device's global stream (what ``rand_like``
    in the models' dropout would draw from)."""
    device = torch.get_default_device()
    g = torch.Generator(device=device)
    cuda = device.type == "cuda"
    g.set_state(torch.cuda.get_rng_state(device) if cuda else torch.get_rng_state())
    return g


@dataclass(frozen=True)
class ClientGraph:
    """One client's subgraph, shared by all K models, with each model's training mask."""

    x: torch.Tensor | SparseRows
    y: torch.Tensor
    masks: torch.Tensor  # [K, n] bool
    adjacency: SparseRows  # GCN's normalised Â (self-loops added), or SAGE's mean operator
    num_nodes: int

    @classmethod
    def of(cls, data: Data, masks: torch.Tensor, arch: str) -> ClientGraph:
        n = int(data.num_nodes)
        # SAGE's mean over in-neighbours (an MLP never aggregates)
        adjacency = operator(data.edge_index, n, "gcn" if arch == "gcn" else "mean", data.x.dtype)
        x = data.x
        sparse = arch != "sage" and x.numel() and (x != 0).float().mean() < SPARSE_BELOW
        if sparse:  # bag-of-words features: SAGE averages them first, so only GCN and MLP
            x = SparseRows(x)
        return cls(x, data.y, masks.to(data.x.device), adjacency, n)

    def aggregate(self, h: torch.Tensor) -> torch.Tensor:
        """GCN's weighted sum or SAGE's mean over in-neighbours, of h [n, D]."""
        return self.adjacency.times(h.contiguous())


class StackedNet:
    """K models of one architecture as stacked tensors: per layer ``w`` [in, K, out] and
    ``b`` [K, out] (GCN, MLP) or ``w``, ``b``, ``root`` (SAGE: lin_l with bias, lin_r)."""

    def __init__(self, arch: str, models: Sequence[torch.nn.Module], dropout: float) -> None:
        self.arch, self.p, self.k = arch, dropout, len(models)
        layers = [_layers(arch, m) for m in models]
        # weights [in, K, out]: the shared first layer multiplies one [in, K·out] matrix
        self.params: list[dict[str, torch.Tensor]] = [
            {
                name: torch.stack([layer[i][name] for layer in layers], dim=int(name != "b"))
                for name in layers[0][i]
            }
            for i in range(len(layers[0]))
        ]

    def forward(
        self, params: list[dict[str, torch.Tensor]], g: ClientGraph, gens: list[torch.Generator]
    ) -> torch.Tensor:
        """Logits [K, n, classes]; dropout before every layer but the first, as the models'."""
        h: Any = g.x  # [n, in], shared by all K until the first layer
        for i, layer in enumerate(params):
            if i:
                h = torch.relu(h)
            if i and self.p > 0:
                mask = torch.stack([torch.rand(h.shape[1:], generator=gen) for gen in gens])
                h = h * (mask >= self.p) / (1.0 - self.p)
            h = self._layer(layer, h, g)
        return h

    def _layer(self, layer: dict[str, torch.Tensor], h: torch.Tensor, g: ClientGraph):
        w = layer["w"]
        if self.arch == "mlp":
            return _times(h, w) + layer["b"][:, None, :]
        n, out = g.num_nodes, w.size(2)  # w [in, K, out]
        if self.arch == "gcn":  # Â (h W) + b, the K models side by side in the columns
            hw = _times(h, w)  # [K, n, out]
            agg = g.aggregate(hw.permute(1, 0, 2).reshape(n, -1)).view(n, self.k, out)
            return agg.permute(1, 0, 2) + layer["b"][:, None, :]
        # SAGE-mean: lin_l(mean of in-neighbours) + lin_r(h)
        wide = h if h.dim() == 2 else h.permute(1, 0, 2).reshape(n, -1)
        mean = g.aggregate(wide)
        mean = mean if h.dim() == 2 else mean.view(n, self.k, -1).permute(1, 0, 2)
        return _times(mean, w) + layer["b"][:, None, :] + _times(h, layer["root"])

    def train(self, graphs: list[ClientGraph], s: Schedule, gens: list[torch.Generator]) -> None:
        """FedAvg's rounds (every client, each from the global weights, then their average
        weighted by subgraph size), or the centralised epochs (one client, no averaging)."""
        sizes = np.array([g.num_nodes for g in graphs], dtype=float)
        share = torch.tensor(sizes / sizes.sum(), dtype=torch.float32)
        local = [
            [{k: v.detach().clone() for k, v in p.items()} for p in self.params] for _ in graphs
        ]
        flat = [[t.requires_grad_() for p in loc for t in p.values()] for loc in local]
        opts = [self._optimizer(f, s) for f in flat]
        for _ in range(s.rounds):
            for c, g in enumerate(graphs):
                with torch.no_grad():
                    for mine, glob in zip(flat[c], self._flat(), strict=True):
                        mine.copy_(glob)
                if not s.persistent_optimizer:
                    opts[c] = self._optimizer(flat[c], s)
                for _ in range(s.local_epochs):
                    opts[c].zero_grad()
                    self._loss(self.forward(local[c], g, gens), g).backward()
                    opts[c].step()
            with torch.no_grad():
                for j, glob in enumerate(self._flat()):
                    if len(graphs) == 1:
                        glob.copy_(flat[0][j])
                    else:
                        glob.copy_(sum(w * f[j] for w, f in zip(share, flat, strict=True)))

    @staticmethod
    def _loss(logits: torch.Tensor, g: ClientGraph) -> torch.Tensor:
        """The sum over models of each model's mean cross-entropy on its training nodes, so
        each model's gradient is the one its own run takes."""
        k, n, classes = logits.shape
        y = g.y.clamp(0, classes - 1)  # labels off the masks (unlabelled: −1) are not read
        ce = F.cross_entropy(logits.reshape(k * n, classes), y.repeat(k), reduction="none")
        m = g.masks.to(ce.dtype)
        return ((ce.view(k, n) * m).sum(1) / m.sum(1).clamp(min=1)).sum()

    @staticmethod
    def _optimizer(params: list[torch.Tensor], s: Schedule) -> torch.optim.Optimizer:
        # fused: one pass over each stacked tensor (the K models' update is still elementwise)
        if s.optimizer == "adam":
            return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay, fused=True)
        return torch.optim.SGD(params, lr=s.lr, weight_decay=s.weight_decay, fused=True)

    def _flat(self) -> list[torch.Tensor]:
        return [t for p in self.params for t in p.values()]

    def states(self, template: torch.nn.Module) -> list[dict[str, torch.Tensor]]:
        """Each model's weights as its own ``state_dict``."""
        out = []
        for k in range(self.k):
            layers = [
                {name: (t[k] if name == "b" else t[:, k]).detach() for name, t in p.items()}
                for p in self.params
            ]
            out.append(_state(self.arch, template, layers))
        return out


def _times(h: torch.Tensor | SparseRows, w: torch.Tensor) -> torch.Tensor:
    """h [n, in] (shared, dense or sparse) or [K, n, in] times w [in, K, out]: [K, n, out]."""
    if isinstance(h, torch.Tensor) and h.dim() == 3:
        return torch.matmul(h, w.permute(1, 0, 2))
    i, k, o = w.shape
    wide = w.view(i, k * o)
    out = h.times(wide) if isinstance(h, SparseRows) else h @ wide
    return out.view(-1, k, o).permute(1, 0, 2)


def _layers(arch: str, model: torch.nn.Module) -> list[dict[str, torch.Tensor]]:
    """A model's weights per layer in the stacked layout (weights transposed to in × out)."""
    state = model.state_dict()
    if arch == "mlp":
        n = len(model.lins)
        return [{"w": state[f"lins.{i}.weight"].T, "b": state[f"lins.{i}.bias"]} for i in range(n)]
    n = len(model.convs)
    if arch == "gcn":
        return [
            {"w": state[f"convs.{i}.lin.weight"].T, "b": state[f"convs.{i}.bias"]} for i in range(n)
        ]
    return [
        {
            "w": state[f"convs.{i}.lin_l.weight"].T,
            "b": state[f"convs.{i}.lin_l.bias"],
            "root": state[f"convs.{i}.lin_r.weight"].T,
        }
        for i in range(n)
    ]


def _state(
    arch: str, template: torch.nn.Module, layers: list[dict[str, torch.Tensor]]
) -> dict[str, Any]:
    state = {k: v.clone() for k, v in template.state_dict().items()}
    for i, layer in enumerate(layers):
        if arch == "mlp":
            state[f"lins.{i}.weight"], state[f"lins.{i}.bias"] = layer["w"].T, layer["b"]
        elif arch == "gcn":
            state[f"convs.{i}.lin.weight"], state[f"convs.{i}.bias"] = layer["w"].T, layer["b"]
        else:
            state[f"convs.{i}.lin_l.weight"] = layer["w"].T
            state[f"convs.{i}.lin_l.bias"] = layer["b"]
            state[f"convs.{i}.lin_r.weight"] = layer["root"].T
    return {k: v.contiguous().clone() for k, v in state.items()}
