"""DP-SGD for local training (Abadi et al. 2016) with Opacus's DPOptimizer: graph level, and
node level on independent rows (GAP's MLP modules, see ``aggregation_perturbation``).

One graph is one record. A PyG batch is one big node tensor, so Opacus's per-layer hooks would
compute per-*node* gradients and clip the wrong thing. We compute per-graph gradients ourselves
and hand them to Opacus as ``p.grad_sample``; its DPOptimizer clips each graph's gradient to
``clip``, adds N(0, (σ·clip)²) to the sum and divides by the expected batch size. A model made
of linear layers alone (the GIN) takes one forward and backward over the whole batch: graphs do
not interact, so a graph's gradient of a layer is the sum over its own rows (its nodes, or the
graph itself after pooling) of output gradient ⊗ input. Where padding every graph to the
batch's largest would more than triple the rows (a few large PROTEINS graphs), and for any
other model, one forward and backward per graph. Batches are Poisson samples (every graph
joins with probability ``sample_rate``), as the subsampled-Gaussian accountant assumes.

Neighbouring datasets differ in one graph of one client. Every client's records are private to
that client, so the run's ε is the worst client's: SubsampledGaussian(q, σ, steps) with the
largest number of DP steps any client took.

``target_epsilon`` (instead of ``noise_multiplier``, ``fgl_workbench.running.calibration``): σ is
the smallest whose ledger meets the target against everyone (DP-SGD's events cover every party),
with the busiest client's steps planned as a client training in every round (exact when every client
takes part in every round: FedAvg at ``client_fraction`` 1, GAP, CeFGC). Composed with another
defense's fixed events (GAP at node level), the composition meets it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from opacus.optimizers import DPOptimizer
from pydantic import ConfigDict, Field
from torch import nn
from torch.func import functional_call, grad, vmap
from torch_geometric.data import Batch, Data
from torch_geometric.utils import to_dense_batch

from fgl_workbench.accountants import ADVERSARIES, Scope, SubsampledGaussian
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.defenses.calibration import NoiseOrEpsilon, target_epsilon_field


class DPSGDConfig(NoiseOrEpsilon):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    clip: float = Field(1.0, gt=0.0, description="L2 bound on one graph's gradient")
    noise_multiplier: float = Field(1.0, gt=0.0, description="noise std / clip")
    target_epsilon: float | None = target_epsilon_field()
    sample_rate: float = Field(
        0.1, gt=0.0, le=1.0, description="Poisson rate: each graph joins a step's batch w.p. q"
    )

    @property
    def steps_per_epoch(self) -> int:
        return max(1, round(1.0 / self.sample_rate))


def private_optimizer(
    optimizer: torch.optim.Optimizer,
    cfg: DPSGDConfig,
    num_records: int,
    generator: torch.Generator,
) -> DPOptimizer:
    """Wraps a client's optimizer: clipping and noise happen inside its ``step``."""
    return DPOptimizer(
        optimizer,
        noise_multiplier=cfg.noise_multiplier,
        max_grad_norm=cfg.clip,
        expected_batch_size=max(1.0, cfg.sample_rate * num_records),
        generator=generator,
    )


def per_graph_gradients(model: nn.Module, graphs: Sequence[Data]) -> list[torch.Tensor]:
    """For each trainable parameter, a [len(graphs), *shape] tensor of per-graph gradients."""
    params = [p for p in model.parameters() if p.requires_grad]
    batched = linear_per_graph_gradients(model, graphs, params) if graphs else None
    if batched is not None:
        return batched
    rows = []
    for g in graphs:
        b = Batch.from_data_list([g])
        loss = F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1))
        rows.append(torch.autograd.grad(loss, params))
    return stacked(rows, params)


PADDING_LIMIT = 3  # the one pass pads each graph to the batch's largest: at most 3× the rows


def linear_per_graph_gradients(
    model: nn.Module, graphs: Sequence[Data], params: list[nn.Parameter]
) -> list[torch.Tensor] | None:
    """Per-graph gradients from one pass over the batch, when every trainable parameter
    belongs to a linear layer applied once, to rows that are either nodes or graphs; None
    otherwise (the caller then runs one graph at a time)."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    owned = {id(p) for m in linears for p in m.parameters() if p.requires_grad}
    mixing = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if mixing or {id(p) for p in params} != owned:  # batch norm makes graphs interact
        return None
    sizes = [g.num_nodes for g in graphs]
    if len(sizes) * max(sizes) > PADDING_LIMIT * sum(sizes):
        return None  # a few large graphs would pad every other one: graph by graph is faster
    seen: dict[nn.Linear, list[tuple[torch.Tensor, torch.Tensor]]] = {m: [] for m in linears}

    def keep(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        seen[module].append((inputs[0], output))  # type: ignore[index]

    hooks = [m.register_forward_hook(keep) for m in linears]
    try:
        b = Batch.from_data_list(list(graphs))
        logits = model(b.x, b.edge_index, b.batch)
    finally:
        for h in hooks:
            h.remove()
    calls = [c for m in linears for c in seen[m]]
    nodes, count = b.num_nodes, len(graphs)
    if any(len(seen[m]) != 1 for m in linears) or any(
        a.dim() != 2 or a.shape[0] not in (nodes, count) for a, _ in calls
    ):
        return None
    loss = F.cross_entropy(logits, b.y.view(-1), reduction="sum")
    outputs = torch.autograd.grad(loss, [out for _, out in calls], allow_unused=True)
    grads: dict[int, torch.Tensor] = {}
    for m, (a, out), g in zip(linears, calls, outputs, strict=True):
        g, a = (torch.zeros_like(out) if g is None else g), a.detach()
        if a.shape[0] == nodes and nodes != count:  # node rows: a graph's rows, padded
            g, a = to_dense_batch(g, b.batch)[0], to_dense_batch(a, b.batch)[0]
        else:  # one row per graph
            g, a = g.unsqueeze(1), a.unsqueeze(1)
        grads[id(m.weight)] = g.transpose(1, 2) @ a  # [graphs, out, in]
        if m.bias is not None:
            grads[id(m.bias)] = g.sum(1)
    return [grads[id(p)] for p in params]


def stacked(rows: list[tuple[torch.Tensor, ...]], params: list[nn.Parameter]) -> list[torch.Tensor]:
    """Per-record gradient rows as one [records, *shape] tensor per parameter."""
    if not rows:
        return [p.new_zeros((0, *p.shape)) for p in params]
    return [torch.stack(per_param) for per_param in zip(*rows, strict=True)]


def train_graph_epochs_dp(
    model: nn.Module,
    graphs: Sequence[Data],
    optimizer: DPOptimizer,
    epochs: int,
    cfg: DPSGDConfig,
    generator: torch.Generator,
) -> int:
    """``epochs`` × ⌈1/q⌉ DP-SGD steps on Poisson batches of graphs; returns the step count."""

    def gradients(idx: torch.Tensor) -> list[torch.Tensor]:
        return per_graph_gradients(model, [graphs[i] for i in idx.tolist()])

    return dp_steps(model, optimizer, len(graphs), epochs, cfg, generator, gradients)


def per_node_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Per-row gradients of a model that treats rows independently (an MLP on fixed node
    features): one vmapped backward, each node its own record."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def loss(p: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, p, (xi[None],)), yi[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0), randomness="different")(params, x, y)
    return [grads[n] for n in names]


def train_rows_epochs_dp(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: DPOptimizer,
    epochs: int,
    cfg: DPSGDConfig,
    generator: torch.Generator,
) -> int:
    """The same on independent rows (node level, after GAP's aggregation)."""

    def gradients(idx: torch.Tensor) -> list[torch.Tensor]:
        return per_node_gradients(model, x[idx], y[idx])

    return dp_steps(model, optimizer, x.size(0), epochs, cfg, generator, gradients)


def dp_steps(
    model: nn.Module,
    optimizer: DPOptimizer,
    num_records: int,
    epochs: int,
    cfg: DPSGDConfig,
    generator: torch.Generator,
    gradients: Callable[[torch.Tensor], list[torch.Tensor]],
) -> int:
    """Poisson batches (each record joins w.p. q), per-record gradients, one private step."""
    model.train()
    steps = steps_for(cfg, epochs)
    for _ in range(steps):
        chosen = poisson_sample(num_records, cfg.sample_rate, generator)
        private_step(model, optimizer, gradients(chosen.nonzero().flatten()))
    return steps


def poisson_sample(num_records: int, q: float, generator: torch.Generator) -> torch.Tensor:
    """[num_records] which records join a step's batch: each independently w.p. q (Poisson),
    the sampling the subsampled-Gaussian accountant assumes."""
    return torch.rand(num_records, generator=generator) < q


def steps_for(cfg: DPSGDConfig, epochs: int) -> int:
    """DP steps of ``epochs`` epochs: ⌈1/q⌉ each, whatever the Poisson batches hold (the
    count ``dp_steps`` takes and the ledger and a planned ledger record)."""
    return epochs * cfg.steps_per_epoch


def private_step(model: nn.Module, optimizer: DPOptimizer, grads: list[torch.Tensor]) -> None:
    """Hand per-record gradients to Opacus, which clips, sums, noises and steps."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p, g in zip(params, grads, strict=True):
        p.grad_sample = g
    optimizer.step()
    optimizer.zero_grad()


def ledger_event(
    cfg: DPSGDConfig, steps: int, unit: str = "record", group: int = 1
) -> SubsampledGaussian:
    """Against everyone: only the client sees its Poisson batches, and everything it sends is
    post-processing of the private steps.

    ``group``: how many training records one unit can touch (a real graph and its feature
    copies in synthetic graphs). Each of the g records joins a batch independently w.p. q, so
    the group is absent w.p. (1−q)^g and otherwise moves the clipped sum by at most g·clip:
    by joint convexity of exp((α−1)·D_α) the pair is no easier to tell apart than the
    subsampled Gaussian at rate 1 − (1−q)^g with noise multiplier σ/g."""
    what = "training record" if group == 1 else f"training record with its {group - 1} copies"
    scope = Scope(unit, f"add or remove one {what} of one client", ADVERSARIES)
    q = 1.0 - (1.0 - cfg.sample_rate) ** group
    return SubsampledGaussian(q, cfg.noise_multiplier / group, steps, scope=scope)


class DPSGD:
    name = "dp-sgd"
    stage = "local_training"
    Config = DPSGDConfig

    def privacy_unit(self, config: DPSGDConfig) -> PrivacyUnit | None:
        return "record"


DEFENSES.register("dp-sgd")(DPSGD())
