"""Secure aggregation: seconds and bytes per round for 10, 50 and 100 clients, pairwise masks
(SecAgg with dropout recovery) vs CKKS (TenSEAL) vs the clear sum; and, with ``--fedavg``,
FedAvg on Cora with and without CKKS end to end.

Protocol rounds: every client contributes one vector the size of FedAvg's GCN on Cora
(92,231 parameters) and gets the aggregate back. Bytes come from the transcript (key
exchange, sealed shares and unmasking shares included); seconds cover every party, run one
after another in this process, so "per client" is the total divided by the clients. The
reference is the clear round: the ratio is what each protocol costs on top of it.

    python benchmarks/secure_agg.py [--clients 10 50 100] [--dropout 0.1]
    FGLWB_DATA=../shared/data python benchmarks/secure_agg.py --fedavg [--rounds 10]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.masked_aggregation import MaskedAggConfig, dropouts, secure_sum
from fgl_workbench.defenses.secure_aggregation import SecureAggConfig, Session
from fgl_workbench.models import num_parameters
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import (
    CIPHERTEXT,
    MODEL_WEIGHTS,
    PUBLIC_KEY,
    SERVER,
    UPDATE,
    Transcript,
    client,
)

SIZE = 92_231  # FedAvg's GCN on Cora (1,433 features, 64 hidden, 7 classes)


def clear_round(vectors: list[np.ndarray], t: Transcript) -> np.ndarray:
    for k, v in enumerate(vectors):
        t.send(0, client(k), SERVER, UPDATE, v.astype(np.float32))
    total = np.sum(vectors, axis=0)
    everyone = [client(k) for k in range(len(vectors))]
    t.broadcast(0, SERVER, everyone, MODEL_WEIGHTS, total.astype(np.float32))
    return total


def masked_round(dropout: float) -> Callable[[list[np.ndarray], Transcript], np.ndarray]:
    cfg = MaskedAggConfig(dropout=dropout)

    def run(vectors: list[np.ndarray], t: Transcript) -> np.ndarray:
        gone = dropouts(len(vectors), cfg, np.random.default_rng(0))
        total, survivors = secure_sum(vectors, cfg, t, gone)
        receivers = [client(k) for k in survivors]
        t.broadcast(0, SERVER, receivers, MODEL_WEIGHTS, total.astype(np.float32))
        return total

    return run


def ckks_round(vectors: list[np.ndarray], t: Transcript) -> np.ndarray:
    session = Session.start(SecureAggConfig())
    t.send(-1, client(0), SERVER, PUBLIC_KEY, session.keys.public_context)
    sealed = [session.client.encrypt(v) for v in vectors]
    for k, s in enumerate(sealed):
        t.send(0, client(k), SERVER, CIPHERTEXT, s)
    aggregate = session.server.sum(sealed, vectors[0].size)
    t.broadcast(0, SERVER, [client(k) for k in range(len(vectors))], CIPHERTEXT, aggregate)
    decrypted = [session.keys.decrypt(aggregate) for _ in vectors]  # every client decrypts
    return decrypted[0]


def protocols(clients: list[int], dropout: float) -> None:
    print(f"one aggregation of {SIZE:,} parameters per client (float64 in, exact or grid sums)")
    header = f"{'clients':>7} {'protocol':<18}{'s/round':>9}{'ratio':>8}"
    print(header + f"{'up kB/client':>14}{'down kB/client':>16}{'max error':>11}")
    settings = [("clear", clear_round), ("masks", masked_round(0.0))]
    if dropout:
        settings.append((f"masks, {dropout:.0%} drop", masked_round(dropout)))
    settings.append(("CKKS", ckks_round))
    rng = np.random.default_rng(0)
    for n in clients:
        vectors = [rng.normal(0, 0.05, SIZE) for _ in range(n)]
        base = None
        for name, run in settings:
            t = Transcript("none")
            start = time.perf_counter()
            total = run(vectors, t)
            seconds = time.perf_counter() - start
            base = base or seconds
            up = sum(m.nbytes for m in t.messages if m.receiver == SERVER) / n / 1e3
            down = sum(m.nbytes for m in t.messages if m.sender == SERVER) / n / 1e3
            kept = set(range(n)) if "drop" not in name else survivors_of(n, dropout)
            error = np.abs(total - np.sum([vectors[k] for k in sorted(kept)], 0)).max()
            print(
                f"{n:>7} {name:<18}{seconds:>9.3f}{seconds / base:>8.1f}"
                f"{up:>14.1f}{down:>16.1f}{error:>11.1e}"
            )


def survivors_of(n: int, dropout: float) -> set[int]:
    cfg = MaskedAggConfig(dropout=dropout)
    return set(range(n)) - dropouts(n, cfg, np.random.default_rng(0))


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def fedavg(rounds: int) -> None:
    """FedAvg on Cora (Louvain, 10 clients) with and without CKKS: seconds and bytes per
    round, and the precision of the released model and of one round's aggregated update."""
    ds = load_dataset("Cora")
    fed = build_federation(ds, make_partition(ds, "louvain", 10, seed=0))
    cfg = {"rounds": rounds, "release": "last", "keep_payloads": "none"}
    settings = [("plaintext", []), ("CKKS", [applied("secure-aggregation", {})])]
    runs, seconds = {}, {}
    for name, defenses in settings:
        start = time.perf_counter()
        runs[name] = TARGETS.get("fedavg").fit(fed, cfg, defenses, seed=0)
        seconds[name] = (time.perf_counter() - start) / rounds
    # one round from the same initial model isolates a single aggregation's error
    one = {
        n: TARGETS.get("fedavg").fit(fed, {**cfg, "rounds": 1, "keep_payloads": "all"}, d, seed=0)
        for n, d in settings
    }
    params = num_parameters(runs["plaintext"].global_model)
    print(f"torch {torch.__version__}, {params} parameters, rounds {rounds}")
    print(f"{'setting':<11}{'s/round':>9}{'up MB/round':>13}{'down MB/round':>15}")
    for name, trained in runs.items():
        total = trained.transcript.total_bytes()
        up, down = (total[d] / rounds / 1e6 for d in ("up", "down"))
        print(f"{name:<11}{seconds[name]:>9.3f}{up:>13.2f}{down:>15.2f}")
    plain, ckks = runs["plaintext"], runs["CKKS"]
    up = ckks.transcript.total_bytes()["up"] / plain.transcript.total_bytes()["up"]
    print(f"time ratio CKKS/plaintext: {seconds['CKKS'] / seconds['plaintext']:.2f}")
    print(f"uplink expansion: {up:.2f}x")
    a, b = flat(plain.global_model), flat(ckks.global_model)
    print(f"released model, relative L2 error: {float((a - b).norm() / a.norm()):.2e}")
    init = next(m.payload for m in one["plaintext"].transcript.messages if m.round == 0)
    start = torch.cat([v.reshape(-1).double() for v in init.values() if v.is_floating_point()])
    step = {n: flat(t.global_model) - start for n, t in one.items()}
    err = (step["CKKS"] - step["plaintext"]).norm() / step["plaintext"].norm()
    print(f"one round's aggregated update, relative L2 error: {float(err):.2e}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--fedavg", action="store_true")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if args.fedavg:
        fedavg(args.rounds)
    else:
        protocols(args.clients, args.dropout)


if __name__ == "__main__":
    main()
