"""Reference-model attacks on Cora: K reference models trained together (``train_batched``)
vs one at a time, in this process (``--jobs 1``, the default before) and in two worker
processes (``--jobs 2``), on the same cores, in one run.

Each row is LiRA (online: IN and OUT references) against one FedAvg target, from a fresh
reference pool, so its time is dominated by the K references it trains. The attack's AUC
and its 95 % bootstrap interval are printed for each way: the batched references are the
same models up to float rounding, so the AUC must agree within the interval.

    FGLWB_DATA=../shared/data python benchmarks/mia.py [--references 16] [--rounds 100]
"""

from __future__ import annotations

import argparse
import time

import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.adversary.threat import background_knowledge, querier_view
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.challenges import membership_challenge
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.attacks.metrics import membership_metrics
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.seeding import seed_everything
from fgl_workbench.targets import TARGETS

WAYS = (
    ("batched", True, 1),
    ("one at a time, jobs 1", False, 1),
    ("one at a time, jobs 2", False, 2),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--references", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, Cora, 10 Louvain "
        f"clients, FedAvg {args.rounds} rounds × 3 local epochs, LiRA online, "
        f"{args.references} reference models"
    )
    ds = load_dataset("Cora")
    fed = build_federation(ds, make_partition(ds, "louvain", 10, seed=0, aux_fraction=0.2))
    params = {"rounds": args.rounds, "local_epochs": 3}
    trained = TARGETS.get("fedavg").fit(fed, params, [], seed=0)
    challenge = membership_challenge(fed, seed=0)
    know = background_knowledge(fed, trained)
    view = querier_view(trained, fed)
    attack = ATTACKS.get("mia-lira")
    config = attack.Config(mode="online", num_references=args.references)
    print(f"{'references':<24}{'seconds':>9}{'ratio':>8}{'AUC':>8}  95% CI")
    seconds = {}
    for name, batched, jobs in WAYS:
        seed_everything(0)
        start = time.perf_counter()
        with ReferencePool(jobs, 0, batched=batched) as pool:
            out = attack.run(AttackInput(view, know, challenge.candidates, pool), config, seed=0)
        seconds[name] = time.perf_counter() - start
        metrics, _ = membership_metrics(out.scores, challenge.is_member)
        ratio = seconds[name] / seconds["batched"]
        print(
            f"{name:<24}{seconds[name]:>9.1f}{ratio:>8.2f}{metrics['auc']:>8.3f}  "
            f"[{metrics['auc_ci_low']:.3f}, {metrics['auc_ci_high']:.3f}]"
        )


if __name__ == "__main__":
    main()
