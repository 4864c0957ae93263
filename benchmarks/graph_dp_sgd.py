"""Per-graph DP-SGD gradients of the GIN as DP-SGD computes them (``per_graph_gradients``: one
forward and backward over the whole Poisson batch where padding the graphs to the largest
costs at most 3× the rows, else graph by graph) vs one forward and backward per graph (the
reference). Both give the same gradients (checked here, within float rounding).

    FGLWB_DATA=../shared/data python benchmarks/graph_dp_sgd.py [--batch 50] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch_geometric.data import Batch

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.defenses.dp_sgd import linear_per_graph_gradients, per_graph_gradients
from fgl_workbench.models.graph import GIN

DATASETS = {
    "synthetic-graphs": {"num_graphs": 200, "num_features": 32, "min_nodes": 6, "max_nodes": 12},
    "PROTEINS": None,
}


def one_at_a_time(model: torch.nn.Module, graphs: list) -> list[torch.Tensor]:
    params = list(model.parameters())
    rows = []
    for g in graphs:
        b = Batch.from_data_list([g])
        loss = F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1))
        rows.append(torch.autograd.grad(loss, params))
    return [torch.stack(r) for r in zip(*rows, strict=True)]


def timed(fn, repeats: int) -> tuple[float, object]:
    fn()  # warm up
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    return (time.perf_counter() - start) / repeats, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=50, help="graphs in the Poisson batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    for name, params in DATASETS.items():
        ds = load_dataset(name, params)
        print(compare(name, ds, ds.graphs[: args.batch], args.repeats))


def compare(name: str, ds, graphs: list, repeats: int) -> str:
    model = GIN(ds.num_features, 64, ds.num_classes, 3, 0.0)
    one_pass = linear_per_graph_gradients(model, graphs, list(model.parameters())) is not None
    ours, fast = timed(lambda: per_graph_gradients(model, graphs), repeats)
    ref, slow = timed(lambda: one_at_a_time(model, graphs), repeats)
    for a, b in zip(fast, slow, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    path = "one pass" if one_pass else "graph by graph (padding)"
    return (
        f"{name}, {len(graphs)} graphs: ours ({path}) {ours * 1e3:.1f} ms, graph by graph "
        f"{ref * 1e3:.1f} ms, {ref / ours:.2f}x"
    )


if __name__ == "__main__":
    main()
