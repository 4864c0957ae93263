"""FedGC's client side: one round's per-class gradients for 10 label-Dirichlet Cora clients
(grown by the 2-hop exchange), computed on each client's receptive field (ours) vs autograd
through the 2-layer GCN on the client's whole subgraph (the straightforward way). Both give
the same gradients (checked here); the field is built once per client, outside the timing,
as the target builds it once per run.

    FGLWB_DATA=../shared/data python benchmarks/fedgc_client_gradients.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.targets.fedgc.condensation import (
    class_gradients,
    normalised_sparse,
    random_gcn,
    receptive_field,
)
from fgl_workbench.targets.fedgc.exchange import extended_client


def whole_graph_gradients(theta, x, adj, y, mask) -> dict[int, list[torch.Tensor]]:
    w = [p.detach().requires_grad_(True) for p in theta]
    logits = adj @ (torch.relu(adj @ (x @ w[0]) + w[1]) @ w[2]) + w[3]
    out = {}
    for c in y[mask].unique().tolist():
        nodes = mask & (y == c)
        loss = F.cross_entropy(logits[nodes], y[nodes])
        out[c] = list(torch.autograd.grad(loss, w, retain_graph=True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    ds = load_dataset("Cora", {"normalize_features": True})
    part = make_partition(
        ds, "label-dirichlet", 10, 0, params={"alpha": 1.0}, split=[0.05, 0.15, 0.8]
    )
    clients = [extended_client(ds, c, 2)[0] for c in build_federation(ds, part).clients]
    graphs = [
        (c.data.x, normalised_sparse(c.data.edge_index, c.num_nodes), c.data.y, c.data.train_mask)
        for c in clients
    ]
    fields = [receptive_field(*g) for g in graphs]
    gen = torch.Generator().manual_seed(0)
    thetas = [random_gcn(ds.num_features, 256, ds.num_classes, gen) for _ in range(args.rounds)]

    start = time.perf_counter()
    ours = [[class_gradients(t, f) for f in fields] for t in thetas]
    t_ours = (time.perf_counter() - start) / args.rounds
    start = time.perf_counter()
    ref = [[whole_graph_gradients(t, *g) for g in graphs] for t in thetas]
    t_ref = (time.perf_counter() - start) / args.rounds
    worst = max(
        float((a - b).abs().max())
        for rr, rf in zip(ours, ref, strict=True)
        for o, r in zip(rr, rf, strict=True)
        for c in r
        for a, b in zip(o[c], r[c], strict=True)
    )
    nodes = sum(c.num_nodes for c in clients)
    field = sum(f.ax.shape[0] for f in fields)
    print(f"10 Cora clients, {nodes} nodes in all, {field} in their receptive fields")
    print(f"{'':28}{'s / round':>10}")
    print(f"{'whole subgraph (autograd)':28}{t_ref:10.4f}")
    print(f"{'receptive field (ours)':28}{t_ours:10.4f}")
    print(f"speed-up {t_ref / t_ours:.1f}x; largest gradient difference {worst:.1e}")


if __name__ == "__main__":
    main()
