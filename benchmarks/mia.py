"""Seconds per membership attack per cell, and the speed-up from training shadow and
reference models in two worker processes (``--jobs 2``) instead of one.

Each attack runs against an already trained target with a fresh reference pool, so its time
includes the shadow/reference models it trains; "cell" is the whole list run in order with
one shared pool, as the runner does it (LiRA and RMIA then share their references).

    FGLWB_DATA=../shared/data python benchmarks/mia.py [--references 32]
"""

from __future__ import annotations

import argparse
import time

import torch

import workbench.data  # noqa: F401
from attacks import ATTACKS, AttackInput
from attacks.membership.reference import ReferencePool
from workbench.challenges import membership_challenge
from workbench.data.catalog import load_dataset
from workbench.data.federation import build_federation
from workbench.data.partition import make_partition
from workbench.seeding import seed_everything
from workbench.targets import TARGETS
from workbench.threat import background_knowledge, querier_view

SETTINGS = [
    ("Cora", "louvain", 10, {"rounds": 100, "local_epochs": 3}),
    ("MUTAG", "iid", 3, {"rounds": 30, "local_epochs": 1, "lr": 0.001}),
]


def attacks(references: int) -> list[tuple[str, dict]]:
    return [
        ("mia-threshold", {"signal": "loss"}),
        ("mia-shadow", {"setting": "full"}),
        ("mia-lira", {"mode": "online", "num_references": references}),
        ("mia-rmia", {"mode": "offline", "num_references": references}),
    ]


def timed(inp: AttackInput, name: str, params: dict) -> float:
    attack = ATTACKS.get(name)
    seed_everything(0)
    start = time.perf_counter()
    attack.run(inp, attack.Config(**params), seed=0)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--references", type=int, default=32)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{args.references} reference models"
    )
    print(f"{'setting':<12}{'attack':<16}{'jobs=1 s':>10}{'jobs=2 s':>10}{'speed-up':>10}")
    for name, method, k, params in SETTINGS:
        ds = load_dataset(name)
        fed = build_federation(ds, make_partition(ds, method, k, seed=0, aux_fraction=0.2))
        start = time.perf_counter()
        trained = TARGETS.get("fedavg").fit(fed, params, [], seed=0)
        fit = time.perf_counter() - start
        setting = f"{name}-{k}"
        print(f"{setting:<12}{'(target fit)':<16}{fit:>10.2f}")
        ch = membership_challenge(fed, seed=0)
        know = background_knowledge(fed, trained)
        view = querier_view(trained, fed)
        totals = [0.0, 0.0]
        for attack, p in attacks(args.references):
            secs = []
            for j in (1, 2):
                with ReferencePool(j, 0) as pool:
                    secs.append(timed(AttackInput(view, know, ch.candidates, pool), attack, p))
            print(
                f"{setting:<12}{attack:<16}{secs[0]:>10.2f}{secs[1]:>10.2f}"
                f"{secs[0] / secs[1]:>10.2f}"
            )
        for i, j in enumerate((1, 2)):
            with ReferencePool(j, 0) as pool:
                inp = AttackInput(view, know, ch.candidates, pool)
                totals[i] = sum(timed(inp, a, p) for a, p in attacks(args.references))
        print(
            f"{setting:<12}{'cell (shared)':<16}{totals[0]:>10.2f}{totals[1]:>10.2f}"
            f"{totals[0] / totals[1]:>10.2f}"
        )


if __name__ == "__main__":
    main()
