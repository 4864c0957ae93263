"""A client's graph diffusion model (CeFGC's GGDM): EDP-GNN trained by denoising score
matching on its graphs, and synthetic graphs sampled from a received one.

Graphs are padded to ``max_nodes``; larger graphs are left out of generator training (the
EDP-GNN code does the same for PROTEINS, at 30 nodes), as the paper does not say. A
synthetic graph takes its node count and node features from one of the *receiving* client's
own graphs (the generator makes structure only; the sender's graphs never travel)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch_geometric.data import Data
from torch_geometric.utils import dense_to_sparse, to_dense_adj

from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
    dp_steps,
    private_optimizer,
    stacked,
    steps_for,
)
from fgl_workbench.targets.cefgc.diffusion import SIGMAS, dsm_loss, langevin_sample
from fgl_workbench.targets.cefgc.score_network import EDPScoreNetwork

ALL_CLASSES = -1  # the key of CeFGC*'s one generator among a client's generators
SAMPLING_BATCH = 32  # templates of similar size sampled together


def class_scale(k: int) -> float:
    """CeFGC*'s noise-schedule stretch for class ``k``."""
    return 1.0 + k / 2


class GeneratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    epochs: int = Field(100, ge=1, le=100_000, description="reference code: 5001")
    batch_size: int = Field(32, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    sigmas: tuple[float, ...] = Field(SIGMAS, min_length=1, description="noise levels")
    channels: tuple[int, ...] = Field((2, 4, 4, 4, 2), min_length=1)
    features: int = Field(16, ge=1, description="node features per EDP layer")
    max_nodes: int = Field(40, ge=2, le=1000, description="larger graphs are not trained on")
    steps: int = Field(100, ge=1, le=10_000, description="Langevin steps per level (code: 1000)")
    step_ratio: float = Field(0.01, gt=0.0, description="α_l = step_ratio · σ_l²")
    temperature: float = Field(0.5, gt=0.0, description="η, the noise's temperature")


def dense(graphs: list[Data], max_nodes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Adjacencies [B, N, N], features [B, N, F] and masks [B, N], padded to ``max_nodes``."""
    b, f = len(graphs), graphs[0].x.shape[1]
    adj = torch.zeros(b, max_nodes, max_nodes)
    x = torch.zeros(b, max_nodes, f)
    mask = torch.zeros(b, max_nodes, dtype=torch.bool)
    for i, g in enumerate(graphs):
        n = g.num_nodes
        if g.edge_index.numel():
            adj[i, :n, :n] = to_dense_adj(g.edge_index, max_num_nodes=n)[0].clamp(max=1)
        x[i, :n], mask[i, :n] = g.x.float(), True
    return adj, x, mask


def trimmed(
    adj: torch.Tensor, x: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A dense batch cut to its largest graph: padding only costs (the score is zero there)."""
    n = int(mask.sum(1).max())
    return adj[:, :n, :n], x[:, :n], mask[:, :n]


def blank_generator(cfg: GeneratorConfig, features: int) -> EDPScoreNetwork:
    """An untrained generator of the recipe's architecture (its shapes are public)."""
    return EDPScoreNetwork(features, len(cfg.sigmas), cfg.channels, cfg.features)


def trainable(graphs: list[Data], cfg: GeneratorConfig) -> list[Data]:
    return [g for g in graphs if 2 <= g.num_nodes <= cfg.max_nodes]


def train_generator(
    graphs: list[Data],
    cfg: GeneratorConfig,
    generator: torch.Generator,
    scale: torch.Tensor | None = None,
    dp: DPSGDConfig | None = None,
) -> EDPScoreNetwork:
    """EDP-GNN trained on ``graphs`` (each at most ``max_nodes``); ``scale`` [len(graphs)]
    stretches each graph's noise levels (CeFGC*'s per-class schedule). ``dp``: DP-SGD, one
    graph with its noisy copies at every level one record, ``epochs`` × ⌈1/q⌉ steps on Poisson
    batches (``generator_dp_steps``)."""
    adj, x, mask = dense(graphs, cfg.max_nodes)
    net = blank_generator(cfg, x.shape[2])
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    decay = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.999)
    net.train()
    if dp is not None:
        private = private_optimizer(opt, dp, len(graphs), generator)

        def gradients(idx: torch.Tensor) -> list[torch.Tensor]:
            s = None if scale is None else scale[idx]
            return per_graph_dsm_gradients(
                net, adj[idx], x[idx], mask[idx], cfg.sigmas, generator, s
            )

        for _ in range(cfg.epochs):
            dp_steps(net, private, len(graphs), 1, dp, generator, gradients)
            decay.step()
        return net.eval()
    for _ in range(cfg.epochs):
        order = torch.randperm(len(graphs), generator=generator)
        for batch in order.split(cfg.batch_size):
            opt.zero_grad()
            s = None if scale is None else scale[batch]
            a, xb, m = trimmed(adj[batch], x[batch], mask[batch])
            loss = dsm_loss(net, a, xb, m, cfg.sigmas, generator, s)
            loss.backward()
            opt.step()
        decay.step()
    return net.eval()


def client_generators(
    graphs: list[Data],
    cfg: GeneratorConfig,
    label_channel: bool,
    generator: torch.Generator,
    dp: DPSGDConfig | None = None,
) -> dict:
    """What a client uploads in round 1, trained on ``graphs`` (each at most ``max_nodes``):
    {"classes": the classes it holds, "models": {class: weights}} (CeFGC), or one model under
    ``ALL_CLASSES`` (CeFGC*, ``label_channel``). ``dp``: trained with DP-SGD. Shadow attacks
    train theirs with the same function, as the recipe is public."""
    labels = [int(g.y.view(-1)[0]) for g in graphs]
    classes = sorted(set(labels))
    held = torch.tensor(classes, dtype=torch.long)  # travels with the weights
    models = {}
    if label_channel and graphs:
        scale = torch.tensor([class_scale(y) for y in labels])
        models[ALL_CLASSES] = train_generator(graphs, cfg, generator, scale, dp).state_dict()
    elif not label_channel:
        for k in classes:
            members = [g for g, y in zip(graphs, labels, strict=True) if y == k]
            models[k] = train_generator(members, cfg, generator, dp=dp).state_dict()
    return {"classes": held, "models": models}


def generator_dp_steps(cfg: GeneratorConfig, dp: DPSGDConfig) -> int:
    """DP-SGD steps a generator trains for (every record takes part in all of them)."""
    return steps_for(dp, cfg.epochs)


def per_graph_dsm_gradients(
    net: EDPScoreNetwork,
    adj: torch.Tensor,
    x: torch.Tensor,
    mask: torch.Tensor,
    sigmas: tuple[float, ...],
    generator: torch.Generator,
    scale: torch.Tensor | None,
) -> list[torch.Tensor]:
    """Each graph's gradient of its DSM loss over all levels: a graph and its noisy copies
    are one record (the reference code's chunked batches would split a record)."""
    params = [p for p in net.parameters() if p.requires_grad]
    rows = []
    for i in range(adj.shape[0]):
        s = None if scale is None else scale[i : i + 1]
        one = slice(i, i + 1)
        loss = dsm_loss(net, *trimmed(adj[one], x[one], mask[one]), sigmas, generator, s)
        rows.append(torch.autograd.grad(loss, params))
    return stacked(rows, params)


def sample_graphs(
    net: EDPScoreNetwork,
    templates: list[Data],
    label: int,
    cfg: GeneratorConfig,
    generator: torch.Generator,
    scale: float = 1.0,
) -> list[Data]:
    """One synthetic graph per template (its node count and features), labelled ``label``.

    Templates are sampled in batches of similar size, each padded to its own largest graph:
    a graph's chain does not depend on its batch, and the network's cost grows with the
    padded size squared (IMDB-MULTI's graphs average 13 nodes of the 30 allowed)."""
    out: list[Data | None] = [None] * len(templates)
    by_size = sorted(range(len(templates)), key=lambda i: templates[i].num_nodes)
    for chunk in torch.tensor(by_size, dtype=torch.long).split(SAMPLING_BATCH):
        batch = [templates[i] for i in chunk.tolist()]
        _, x, mask = dense(batch, batch[-1].num_nodes)
        adj = langevin_sample(
            net,
            x,
            mask,
            cfg.sigmas,
            cfg.steps,
            cfg.step_ratio,
            cfg.temperature,
            generator,
            torch.full((len(batch),), scale),
        )
        for i, a, t in zip(chunk.tolist(), adj, batch, strict=True):
            n = t.num_nodes
            edge_index, _ = dense_to_sparse(a[:n, :n])
            out[i] = Data(x=t.x.clone(), edge_index=edge_index, y=torch.tensor([label]))
    return out  # type: ignore[return-value]


def generator_sources(
    payloads: list[dict], cfg: GeneratorConfig, features: int
) -> list[tuple[EDPScoreNetwork, int, float]]:
    """(network, class, noise scale) for every (generator, class) in ``payloads`` (each
    {"classes", "models": {class or ALL_CLASSES: weights}}); a label-channel generator serves
    each of its classes on that class's schedule."""
    out = []
    for p in payloads:
        for key, state in p["models"].items():
            net = blank_generator(cfg, features)
            net.load_state_dict(state)
            if key == ALL_CLASSES:
                out += [(net.eval(), k, class_scale(k)) for k in p["classes"].tolist()]
            else:
                out.append((net.eval(), key, 1.0))
    return out
