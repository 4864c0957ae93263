"""GCN and GraphSAGE message passing on one large CSBM client: ours (a CSR product with the
client's aggregation operator, built once, ``fgl_workbench.models.sparse``) against PyG's
``GCNConv`` / ``SAGEConv`` over ``edge_index`` on the same weights.

Per training epoch (forward, backward, Adam step), per evaluation forward (no grad), the
activation memory each training forward keeps for its backward (the bytes of the distinct
tensors autograd saves), and the peak memory of one training epoch over what was resident
before it (the process's resident high-water mark, reset after a warm-up epoch, in a fresh
process per model, large blocks returned to the system when freed). Ours keeps its operator
with the graph: its size and the seconds it takes to build once are rows of their own.
Medians over ``--repeats`` after one warm-up each. Run on an idle machine with one thread:

    OMP_NUM_THREADS=1 python benchmarks/message_passing.py [--nodes 100000 --degree 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

from fgl_workbench.data.synthetic import CSBMParams, csbm
from fgl_workbench.models import ModelConfig, build_model
from fgl_workbench.models.sparse import build_operator

PYG = {"gcn": GCNConv, "sage": SAGEConv}
OPERATOR = {"gcn": "gcn", "sage": "mean"}


def pyg_twin(model: nn.Module, arch: str) -> nn.Module:
    """The same model, weights included, with PyG's own layers."""
    twin = build_model(ModelConfig(arch=arch), 1, 1, "node")
    twin.convs = nn.ModuleList(PYG[arch](c.in_channels, c.out_channels) for c in model.convs)
    twin.dropout = model.dropout
    twin.load_state_dict(model.state_dict())
    return twin


def median_seconds(step: Callable[[], object], repeats: int) -> float:
    step()  # warm-up (ours: builds the operator)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def saved_bytes(forward: Callable[[], torch.Tensor]) -> int:
    """Bytes of the distinct tensors autograd saves for the backward of one forward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.layout == torch.strided:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


def training(model: nn.Module, data) -> tuple[Callable[[], torch.Tensor], Callable[[], None]]:
    """The model's training loss on ``data`` and one full-batch Adam epoch."""
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def forward() -> torch.Tensor:
        return F.cross_entropy(model(data.x, data.edge_index)[data.train], data.y[data.train])

    def epoch() -> None:
        model.train()
        opt.zero_grad()
        forward().backward()
        opt.step()

    return forward, epoch


def models(arch: str, features: int, classes: int) -> tuple[nn.Module, nn.Module]:
    """Ours and its PyG twin, on the same seeded weights."""
    torch.manual_seed(0)
    ours = build_model(ModelConfig(arch=arch), features, classes, "node")
    return ours, pyg_twin(ours, arch)


def resident_kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(f"{field}:")[1].split()[0])


def epoch_peak(path: str, arch: str, which: int) -> None:
    """In a fresh process: prints the MiB one training epoch of ``models(...)[which]`` peaks
    at over what was resident before it (after a warm-up epoch)."""
    data = SimpleNamespace(**torch.load(path, weights_only=True))  # tensors alone
    model = models(arch, data.x.shape[1], int(data.y.max()) + 1)[which]
    epoch = training(model, data)[1]
    epoch()
    Path("/proc/self/clear_refs").write_text("5")  # resets the resident high-water mark
    before = resident_kib("VmRSS")
    epoch()
    print((resident_kib("VmHWM") - before) / 1024)


def peak_mib(path: str, arch: str, which: int) -> float:
    # glibc's default threshold grows to keep freed large blocks resident: pinned, they go back
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**16)}
    command = [sys.executable, __file__, "--peak-of", path, arch, str(which)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def measure(model: nn.Module, data, repeats: int) -> tuple[float, float, int]:
    forward, epoch = training(model, data)

    @torch.no_grad()
    def evaluate() -> torch.Tensor:
        model.eval()
        return model(data.x, data.edge_index)

    train_s = median_seconds(epoch, repeats)
    eval_s = median_seconds(evaluate, repeats)
    model.train()
    return train_s, eval_s, saved_bytes(forward)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--degree", type=float, default=10.0)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--arch", nargs="+", default=["gcn", "sage"], choices=sorted(PYG))
    parser.add_argument("--peak-of", nargs=3, help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args()
    if args.peak_of:
        path, arch, which = args.peak_of
        return epoch_peak(path, arch, int(which))
    params = CSBMParams(num_nodes=args.nodes, num_features=args.features, avg_degree=args.degree)
    data = csbm(params).data
    data.train = torch.rand(args.nodes, generator=torch.Generator().manual_seed(0)) < 0.2
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{args.nodes} nodes, {data.edge_index.shape[1]} edges, {args.features} features"
    )
    print(f"{'arch':<6}{'':<24}{'ours':>10}{'PyG':>10}{'PyG/ours':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "client.pt")
        torch.save({k: data[k] for k in ("x", "y", "edge_index", "train")}, path)
        for arch in args.arch:
            ours, theirs = models(arch, args.features, params.num_classes)
            start = time.perf_counter()
            built = build_operator(data.edge_index, args.nodes, OPERATOR[arch], data.x.dtype)
            built_s = time.perf_counter() - start
            a, b = measure(ours, data, args.repeats), measure(theirs, data, args.repeats)
            rows = [
                ("s / training epoch", a[0], b[0]),
                ("s / eval forward", a[1], b[1]),
                ("MiB saved for backward", a[2] / 2**20, b[2] / 2**20),
                ("MiB epoch peak", peak_mib(path, arch, 0), peak_mib(path, arch, 1)),
            ]
            for name, x, y in rows:
                print(f"{arch:<6}{name:<24}{x:>10.4f}{y:>10.4f}{y / x:>10.2f}")
            size = sum(t.untyped_storage().nbytes() for t in operator_tensors(built)) / 2**20
            print(f"{arch:<6}{'MiB operator (kept)':<24}{size:>10.4f}")
            print(f"{arch:<6}{'s to build operator':<24}{built_s:>10.4f}{'(once)':>10}")


def operator_tensors(op) -> list[torch.Tensor]:
    """The CSR components of an operator and of its transpose."""
    return [
        t
        for csr in (op.csr, op.csr_t)
        for t in (csr.crow_indices(), csr.col_indices(), csr.values())
    ]


if __name__ == "__main__":
    main()
