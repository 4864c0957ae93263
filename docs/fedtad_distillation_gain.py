"""What FedTAD's server-side distillation does inside one round, on the Table 2 suite's own
cells: test accuracy of the aggregated model, of the reliability-weighted ensemble of the
uploaded models it distils from, and of the global model after distillation. Scoring runs in
eval mode and the probe's own models are built on a forked random stream, so the training
trajectory, and the released model, are the suite's.

    FGLWB_DATA=../shared/data .venv/bin/python docs/fedtad_distillation_gain.py \
        [--suite examples/reproduction/fedtad-table2.yaml] \
        [--dataset Cora] [--clients 20] [--seed 0] [--param outer_steps=10 ...]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import yaml
from torch import nn

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.running.cell import partition_cell
from fgl_workbench.running.suite import expand, load_suite
from fgl_workbench.seeding import Streams
from fgl_workbench.targets.fedtad.reliability import reliability_weights
from fgl_workbench.targets.fedtad.target import Distiller, FedTAD
from fgl_workbench.targets.training import score_node_clients


class WeightedEnsemble(nn.Module):
    """Σ_k ω_k^c · softmax(f_k)_c: the teachers as the distillation weighs them, as log-scores."""

    def __init__(self, teachers: list[nn.Module], weights: np.ndarray) -> None:
        super().__init__()
        self.teachers = nn.ModuleList(teachers)
        self.register_buffer("weights", torch.as_tensor(weights, dtype=torch.float))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        probs = [
            w * t(x, edge_index).softmax(1)
            for t, w in zip(self.teachers, self.weights, strict=True)
        ]
        return torch.stack(probs).sum(0).clamp_min(1e-12).log()


class ProbedFedTAD(FedTAD):
    """FedTAD that scores the global model before and after each round's distillation."""

    def __init__(self, clients: list) -> None:
        self.clients = clients
        self.rows: list[tuple[int, float, float, float]] = []

    def accuracy(self, model: nn.Module) -> float:
        with torch.no_grad():
            return score_node_clients(model, self.clients, "test")["accuracy"]

    def after_aggregation(
        self, context: Distiller, r: int, global_model: nn.Module, uploads: list, chosen
    ) -> None:
        before = self.accuracy(global_model)
        with torch.random.fork_rng():  # building models draws initial weights: keep the stream
            teachers = context.teachers(uploads)
        ensemble = self.accuracy(WeightedEnsemble(teachers, reliability_weights(context.phi)))
        super().after_aggregation(context, r, global_model, uploads, chosen)
        self.rows.append((r, before, ensemble, self.accuracy(global_model)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="examples/reproduction/fedtad-table2.yaml")
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--param", action="append", default=[], help="KEY=VALUE (YAML) override")
    args = parser.parse_args()
    cell = next(
        c
        for c in expand(load_suite(args.suite))
        if (c.dataset.name, c.partition.num_clients, c.seed, c.target.name)
        == (args.dataset, args.clients, args.seed, "fedtad")
    )
    ds = load_dataset(cell.dataset.name, cell.dataset.params)
    federation = build_federation(ds, partition_cell(cell, ds, Streams.public()).partition)
    probe = ProbedFedTAD(federation.clients)
    params = dict(cell.target.params)
    for item in args.param:
        key, _, value = item.partition("=")
        params[key] = yaml.safe_load(value)
    trained = probe.fit(federation, params, [], cell.seed)
    rows = np.array(probe.rows)
    print(f"{cell.dataset.name}, {args.clients} Louvain clients, seed {cell.seed}, test accuracy %")
    print(f"{'round':>6}{'aggregated':>12}{'ensemble':>10}{'distilled':>11}")
    shown = [r for r in (0, 4, 9, 19, 49, 99) if r < len(rows)]
    for r, before, ensemble, after in rows[shown]:
        print(f"{int(r):>6}{100 * before:>12.1f}{100 * ensemble:>10.1f}{100 * after:>11.1f}")
    gain = 100 * (rows[:, 3] - rows[:, 1])
    print(
        f"distillation gain per round: mean {gain.mean():+.2f}, rounds with a gain "
        f"{(gain > 0).mean():.0%}; released model {100 * trained.utility['accuracy']:.1f}"
    )


if __name__ == "__main__":
    main()
