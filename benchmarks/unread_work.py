"""Work nobody reads, ours against what the workbench did before (issue 44), in one run,
in CPU seconds (``cpu_seconds``).

- FedAvg on Cora (Louvain, 10 clients) released ``last``: validation of the last round only,
  against validating every round; and on clients without validation nodes (reference
  models): none, against every round.
- The querier's answer tables at hops 0, 1, 2: posteriors only (what loss/entropy attacks
  read), against posteriors and embeddings.
- A fit on the CPU as a reference-model worker runs it: no default-device mode, against
  ``torch.set_default_device("cpu")`` (a mode intercepting every torch call).
- The transcript: seconds per round recording 1,000 and 10,000 rounds of 10 clients (linear:
  the same per round).
- ``fgl-workbench epsilon``: a fresh process without ``--pld`` against one with it.

    OMP_NUM_THREADS=1 FGLWB_DATA=../shared/data python benchmarks/unread_work.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Collection, Sequence

import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import Federation, build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.targets.fedavg.node import NodeFedAvg
from fgl_workbench.transcript import SERVER, Transcript, client

EPSILON = ["epsilon", "--mechanism", "subsampled-gaussian", "--sigma", "1", "--q", "0.01"]
EPSILON += ["--steps", "1000"]
REPEATS = 3


class EveryRound(NodeFedAvg):
    """FedAvg as it was: every client validated every round, read or not."""

    @staticmethod
    def validation_rounds(cfg, rule, clients: Sequence) -> Collection[int]:
        return range(cfg.rounds)


def cpu_seconds() -> float:
    """CPU time of this process and the children it waited for: on a shared machine, where
    the wall clock mostly measures the other users, it is what an idle one would take
    (one thread)."""
    used = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(u.ru_utime + u.ru_stime for u in used)


def seconds(work: Callable[[], object]) -> float:
    start = cpu_seconds()
    work()
    return cpu_seconds() - start


def paired(ours: Callable[[], object], before: Callable[[], object]) -> tuple[float, float]:
    """The fastest of ``REPEATS`` alternate runs of each: on a shared machine the minimum is
    the least disturbed, and alternating spreads drift over both."""
    times = [(seconds(ours), seconds(before)) for _ in range(REPEATS)]
    return min(t[0] for t in times), min(t[1] for t in times)


def without_validation(fed: Federation) -> Federation:
    """The same clients with their validation nodes made training-free test nodes: a
    reference model's clients hold none."""
    clients = []
    for c in fed.clients:
        data = c.data.clone()
        data.test_mask = data.test_mask | data.val_mask
        data.val_mask = torch.zeros_like(data.val_mask)
        clients.append(dataclasses.replace(c, data=data))
    return dataclasses.replace(fed, clients=tuple(clients))


def row(name: str, ours: float, before: float, unit: str = "s") -> None:
    print(f"{name:<46}{ours:>10.3f}{before:>10.3f} {unit:<4}{before / ours:>7.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, load "
        f"{os.getloadavg()[0]:.2f}, FedAvg rounds {args.rounds}"
    )
    print(f"{'work':<46}{'ours':>10}{'before':>10}{'':5}{'saving':>8}")
    ds = load_dataset("Cora")
    fed = build_federation(ds, make_partition(ds, "louvain", 10, seed=0))
    cfg = {"rounds": args.rounds, "release": "last"}
    trained = {}

    def fit(loop: NodeFedAvg, federation: Federation, key: str) -> None:
        trained[key] = loop.fit(federation, cfg, [], seed=0)

    fit(NodeFedAvg(), fed, "ours")  # warm-up: dataset caches, first-call costs
    ours, before = paired(
        lambda: fit(NodeFedAvg(), fed, "ours"), lambda: fit(EveryRound(), fed, "before")
    )
    assert trained["ours"].utility == trained["before"].utility
    row("fedavg fit, release last", ours, before)
    bare = without_validation(fed)
    ours, before = paired(
        lambda: fit(NodeFedAvg(), bare, "ours"), lambda: fit(EveryRound(), bare, "before")
    )
    row("fedavg fit, no validation nodes (references)", ours, before)

    api, known = trained["ours"].query, ds.data
    ours, before = paired(
        lambda: api.answers((0, 1, 2), known, embeddings=False),
        lambda: api.answers((0, 1, 2), known, embeddings=True),
    )
    row("querier answers, hops 0-2", ours, before)

    def in_mode() -> None:
        torch.set_default_device("cpu")
        try:
            fit(NodeFedAvg(), bare, "before")
        finally:
            torch.set_default_device(None)

    ours, before = paired(lambda: fit(NodeFedAvg(), bare, "ours"), in_mode)
    row("reference fit in a CPU worker (device mode)", ours, before)

    payload = {"w": torch.zeros(1000)}
    per_round = {}
    for rounds in (1_000, 10_000):
        t = Transcript()

        def record(t: Transcript = t, rounds: int = rounds) -> None:
            for r in range(rounds):
                t.broadcast(r, SERVER, [client(k) for k in range(10)], "model_weights", payload)
                for k in range(10):
                    t.send(r, client(k), SERVER, "model_weights", payload)

        per_round[rounds] = seconds(record) / rounds * 1e3
    print(
        f"{'transcript ms/round at 1,000 and 10,000 rounds':<46}{per_round[1_000]:>10.3f}"
        f"{per_round[10_000]:>10.3f} ms  growth {per_round[10_000] / per_round[1_000]:.2f}×"
    )

    line = [sys.executable, "-m", "fgl_workbench", *EPSILON]

    def epsilon(*extra: str) -> None:
        subprocess.run([*line, *extra], check=True, capture_output=True)

    plain, pld = paired(epsilon, lambda: epsilon("--pld"))
    row("fgl-workbench epsilon (before: with PLD)", plain, pld)


if __name__ == "__main__":
    main()
