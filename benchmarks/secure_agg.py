"""FedAvg on Cora (Louvain, 10 clients) with and without secure aggregation (TenSEAL CKKS).

Prints seconds and bytes per round (uplink and downlink, read from the transcript), the
ciphertext expansion, and the precision: the relative L2 error of the released model and of the
last round's aggregated update against the plaintext run with the same seed.

    FGLWB_DATA=../shared/data python benchmarks/secure_agg.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import time

import torch

import workbench.data  # noqa: F401
from defenses import applied
from workbench.data.catalog import load_dataset
from workbench.data.federation import build_federation
from workbench.data.partition import make_partition
from workbench.models import num_parameters
from workbench.targets import TARGETS


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    ds = load_dataset("Cora")
    fed = build_federation(ds, make_partition(ds, "louvain", 10, seed=0))
    cfg = {"rounds": args.rounds, "release": "last", "keep_payloads": "none"}
    runs = {}
    for name, defenses in [("plaintext", []), ("CKKS", [applied("secure-aggregation", {})])]:
        start = time.perf_counter()
        runs[name] = TARGETS.get("fedavg").fit(fed, cfg, defenses, seed=0)
        runs[name].seconds = (time.perf_counter() - start) / args.rounds
    # one round from the same initial model isolates a single aggregation's error
    one = {
        n: TARGETS.get("fedavg").fit(fed, {**cfg, "rounds": 1, "keep_payloads": "all"}, d, seed=0)
        for n, d in [("plaintext", []), ("CKKS", [applied("secure-aggregation", {})])]
    }
    params = num_parameters(runs["plaintext"].global_model)
    print(f"torch {torch.__version__}, {params} parameters, rounds {args.rounds}")
    print(f"{'setting':<11}{'s/round':>9}{'up MB/round':>13}{'down MB/round':>15}")
    for name, trained in runs.items():
        total = trained.transcript.total_bytes()
        up, down = (total[d] / args.rounds / 1e6 for d in ("up", "down"))
        print(f"{name:<11}{trained.seconds:>9.3f}{up:>13.2f}{down:>15.2f}")
    plain, ckks = runs["plaintext"], runs["CKKS"]
    up = ckks.transcript.total_bytes()["up"] / plain.transcript.total_bytes()["up"]
    print(f"time ratio CKKS/plaintext: {ckks.seconds / plain.seconds:.2f}")
    print(f"uplink expansion: {up:.2f}x")
    a, b = flat(plain.global_model), flat(ckks.global_model)
    print(f"released model, relative L2 error: {float((a - b).norm() / a.norm()):.2e}")
    init = next(m.payload for m in one["plaintext"].transcript.messages if m.round == 0)
    start = torch.cat([v.reshape(-1).double() for v in init.values() if v.is_floating_point()])
    step = {n: flat(t.global_model) - start for n, t in one.items()}
    err = (step["CKKS"] - step["plaintext"]).norm() / step["plaintext"].norm()
    print(f"one round's aggregated update, relative L2 error: {float(err):.2e}")


if __name__ == "__main__":
    main()
