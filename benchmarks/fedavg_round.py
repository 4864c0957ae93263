"""Seconds per FedAvg round on Cora (Louvain, 10 clients) and PROTEINS (IID, 3 clients).

Reference: the compute floor of the same round, i.e. only the clients' local training steps
(same models, optimisers and epochs) with no transcript, aggregation or per-round validation.
The ratio is what the federation machinery costs on top of the training it runs.

    FGLWB_DATA=../shared/data python benchmarks/fedavg_round.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import time

import torch

import fgl_workbench.data  # noqa: F401
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.models import build_model
from fgl_workbench.seeding import seed_everything
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.fedavg import FedAvgConfig
from fgl_workbench.targets.training import make_optimizer, train_graph_epochs, train_node_epochs

SETTINGS = [
    ("Cora", "louvain", 10, {"rounds": 0}),
    ("PROTEINS", "iid", 3, {"rounds": 0, "local_epochs": 1, "lr": 0.001}),
]


def floor_seconds(fed, cfg: FedAvgConfig) -> float:
    ds = fed.dataset
    models = [
        build_model(cfg.model, ds.num_features, ds.num_classes, ds.level) for _ in fed.clients
    ]
    opts = [make_optimizer(cfg.optimizer, m, cfg.lr, cfg.weight_decay) for m in models]
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(cfg.rounds):
        for c, m, o in zip(fed.clients, models, opts, strict=True):
            if ds.level == "node":
                train_node_epochs(m, c.data, o, cfg.local_epochs)
            else:
                train_graph_epochs(m, c.train, o, cfg.local_epochs, cfg.batch_size, gen)
    return (time.perf_counter() - start) / cfg.rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, rounds {args.rounds}")
    print(f"{'setting':<22}{'ours s/round':>14}{'floor s/round':>15}{'ratio':>8}")
    for name, method, k, params in SETTINGS:
        ds = load_dataset(name)
        fed = build_federation(ds, make_partition(ds, method, k, seed=0))
        cfg = FedAvgConfig(**{**params, "rounds": args.rounds})
        seed_everything(0)
        start = time.perf_counter()
        TARGETS.get("fedavg").fit(fed, cfg, [], seed=0)
        ours = (time.perf_counter() - start) / args.rounds
        seed_everything(0)
        ref = floor_seconds(fed, cfg)
        print(f"{name + '-' + str(k):<22}{ours:>14.4f}{ref:>15.4f}{ours / ref:>8.2f}")


if __name__ == "__main__":
    main()
