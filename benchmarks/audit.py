"""What the canary audit costs beside what it audits: seconds to train a DP cell, to audit it
with m canaries (each game through the defense's own mechanism at the cell's parameters) and
to run one membership attack on it, on Cora (DP-FedAvg, local mode: a hidden-sample and a
server claim) and PROTEINS (DP-SGD), with the ratio audit / training.

    FGLWB_DATA=../shared/data python benchmarks/audit.py [--canaries 1000]
"""

from __future__ import annotations

import argparse
import time

import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.adversary.threat import background_knowledge, querier_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import membership_challenge
from fgl_workbench.audits import audit_run, context_of
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.targets import TARGETS

GIN = {"model": {"arch": "gin", "hidden": 64, "layers": 3}, "local_epochs": 1, "lr": 0.01}
SETTINGS = [
    (
        "Cora",
        "louvain",
        10,
        {"rounds": 100, "local_epochs": 3, "client_fraction": 0.5},
        ("dp-fedavg", {"clip": 1.0, "noise_multiplier": 1.0, "mode": "local"}),
    ),
    (
        "PROTEINS",
        "iid",
        3,
        {**GIN, "rounds": 10},
        ("dp-sgd", {"clip": 1.0, "noise_multiplier": 1.0, "sample_rate": 0.1}),
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--canaries", type=int, default=1000)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, m = {args.canaries}")
    header = f"{'cell':<20}{'train s':>9}{'audit s':>9}{'attack s':>9}{'audit/train':>13}"
    print(header + "  claims audited")
    for name, method, k, params, (defense, dparams) in SETTINGS:
        ds = load_dataset(name)
        fed = build_federation(ds, make_partition(ds, method, k, seed=0, aux_fraction=0.2))
        defenses = [applied(defense, dparams)]
        start = time.perf_counter()
        trained = TARGETS.get("fedavg").fit(fed, params, defenses, seed=0)
        train = time.perf_counter() - start
        start = time.perf_counter()
        audits = audit_run(context_of(trained, defenses), defenses, 1e-5, args.canaries)
        audit = time.perf_counter() - start
        attack = ATTACKS.get("mia-threshold")
        inp = AttackInput(
            querier_view(trained, fed),
            background_knowledge(fed, trained),
            membership_challenge(fed, seed=0).candidates,
        )
        start = time.perf_counter()
        attack.run(inp, attack.Config(signal="loss"), seed=0)
        seconds = time.perf_counter() - start
        cell = f"{name}+{defense}"
        print(
            f"{cell:<20}{train:>9.2f}{audit:>9.2f}{seconds:>9.2f}{audit / train:>13.2f}  "
            f"{len(audits)}"
        )
        for a in audits:
            print(f"    {a.summary()}  [{a.seconds:.2f} s]")


if __name__ == "__main__":
    main()
