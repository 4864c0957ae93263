"""Each record's loss gradient against a model update, for FedMIA's gradient test (Zhu et al.
2024): a client's update is the sum of its members' gradient steps, so a member's own
descent direction −∇ℓ(θ, x) points along it more than a non-member's does.

The gradients are taken one record at a time (the workbench's sparse message passing has no
batched per-sample rule), on what a query of the record sends the model: the node alone
(``hops`` 0) or its ``hops``-hop subgraph of the population graph, or the graph itself.
About a millisecond a record for Cora's 2-layer GCN on one core, so a server reading ten
uploads a round pays about 30 s a round on Cora: ``window`` bounds it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.utils import k_hop_subgraph

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge
from fgl_workbench.attacks.membership.observe import rebuilt_model
from fgl_workbench.models import ModelSpec

State = dict[str, torch.Tensor]
Forward = Callable[[nn.Module], torch.Tensor]  # one record's logits, [1, classes]


def record_forwards(knowledge: BackgroundKnowledge, records: Candidates, hops: int) -> list:
    """One forward per record, built once and reused for every model: a node alone or in
    its ``hops``-hop subgraph (its own logits row), or a graph."""
    if records.level == "graph":
        return [
            lambda m, g=g: m(g.x, g.edge_index, torch.zeros(g.num_nodes, dtype=torch.long))
            for g in records.graphs
        ]
    graph = knowledge.graph
    assert graph is not None, "node-level records are answered on the population graph"
    out = []
    for node in np.asarray(records.ids, dtype=np.int64).tolist():
        if hops == 0:
            x, ei, pos = graph.x[node : node + 1], torch.zeros(2, 0, dtype=torch.long), 0
        else:
            nodes, ei, mapping, _ = k_hop_subgraph(
                node, hops, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes
            )
            x, pos = graph.x[nodes], int(mapping[0])
        out.append(lambda m, x=x, ei=ei, pos=pos: m(x, ei)[pos : pos + 1])
    return out


def update_cosines(
    spec: ModelSpec,
    state: State,
    start: State,
    forwards: list[Forward],
    labels: np.ndarray,
) -> np.ndarray:
    """cos(−∇ℓ(θ, x), θ − θ₀) per record, θ the model ``state`` (an upload, or the next
    global model) and θ₀ the ``start`` it was trained from; ℓ the cross-entropy at the
    record's label, the gradient over the parameters the update moved."""
    model = rebuilt_model(spec, state, "mia-fedmia").eval()  # dropout off: as released
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    direction = torch.cat([(state[n] - start[n]).reshape(-1).float() for n in names])
    norm = direction.norm() + 1e-12
    y = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    out = np.empty(len(forwards))
    for i, forward in enumerate(forwards):
        loss = F.cross_entropy(forward(model), y[i : i + 1])
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        g = torch.cat(
            [
                torch.zeros_like(p).reshape(-1) if d is None else d.reshape(-1)
                for d, p in zip(grads, params, strict=True)
            ]
        )
        out[i] = float(-(g @ direction) / (g.norm() * norm + 1e-12))
    return out
