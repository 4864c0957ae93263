"""One federation on Flower: the apps, the grid, the rounds, and the ledger of what ran."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from flwr.app import ArrayRecord
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.models import ModelSpec
from fgl_workbench.targets.fedavg.rounds import FedAvgLoop
from fgl_workbench.targets.flower import privacy
from fgl_workbench.targets.flower.apps import Clients, client_app, strategy
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.grid import FIRST_NODE_ID, InlineGrid, RecordingGrid
from fgl_workbench.transcript import Transcript

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class FlowerRun:
    """What a federation left: the released (last round's) model, the clients' models, the
    ledger, per-round history and figures (Flower's own ε among them)."""

    arrays: State
    models: list[nn.Module]
    ledger: PrivacyLedger
    history: list[dict[str, float]]
    figures: dict[str, float]


def run_federation(
    loop: FedAvgLoop,
    clients: Sequence[Any],
    spec: ModelSpec,
    global_model: nn.Module,
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    transcript: Transcript,
    generator: torch.Generator,
) -> FlowerRun:
    """``cfg.rounds`` rounds of Flower's strategy over an in-process grid of the clients."""
    n = len(clients)
    state = Clients(loop, clients, [spec.build() for _ in clients], cfg, generator)
    accountant = privacy.flower_accountant(n) if dp is not None and dp.mode == "central" else None
    server = strategy(cfg, n, dp, accountant)
    grid = RecordingGrid(
        InlineGrid(client_app(state, dp, cfg.dp_clipping), n),
        transcript,
        {FIRST_NODE_ID + k: k for k in range(n)},
    )
    result = flower_server(server, grid, global_model.state_dict(), cfg.rounds)
    figures: dict[str, float] = {}
    if accountant is not None:
        figures["flower_epsilon"] = float(accountant.get_privacy_spent().epsilon)
    if dp is not None and dp.mode == "local":
        figures["flower_epsilon_per_upload"] = privacy.local_dp_mod_epsilon(dp)
    return FlowerRun(
        dict(result.arrays.to_torch_state_dict()),
        list(state.models),
        ledger(cfg, dp, n, max(state.uploads)),
        history(result, cfg.rounds),
        figures,
    )


def flower_server(
    server: Any,
    grid: Any,
    initial: State,
    rounds: int,
    evaluate_fn: Callable[[int, ArrayRecord], None] | None = None,
) -> Any:
    """Flower's ``Strategy.start`` as a ServerApp runs it, in this process: the task
    identity Flower's messages are stamped with set, its info and warnings (a line per client
    per round) muted."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(logging.ERROR)
    try:
        return server.start(
            grid=grid,
            initial_arrays=ArrayRecord(initial),
            num_rounds=rounds,
            evaluate_fn=evaluate_fn,
        )
    finally:
        flwr_log.setLevel(level)


def history(result: Any, rounds: int) -> list[dict[str, float]]:
    """Each round's aggregated client metrics, as Flower's ``Result`` holds them."""
    rows = []
    for r in range(1, rounds + 1):
        row: dict[str, float] = {"round": float(r - 1)}
        train = result.train_metrics_clientapp.get(r, {})
        evaluated = result.evaluate_metrics_clientapp.get(r, {})
        if "train_loss" in train:
            row["train_loss"] = float(train["train_loss"])
        row["val_accuracy"] = float(evaluated.get("accuracy", float("nan")))
        rows.append(row)
    return rows


def ledger(
    cfg: FlowerConfig, dp: DPFedAvgConfig | None, num_clients: int, busiest: int
) -> PrivacyLedger:
    """The run's events: Flower's DP scoped per adversary, and the clients' metrics."""
    events: list[Any] = []
    if dp is not None and dp.mode == "central":
        m = cfg.per_round(num_clients)
        events += privacy.central_events(dp, cfg.rounds, m, num_clients, cfg.dp_clipping)
    elif dp is not None:
        events += privacy.local_events(dp, busiest)
    if dp is not None and cfg.report_metrics:
        kinds = ["training loss", "example counts", "validation accuracy"]
        events.append(privacy.metrics_event(kinds))
    return PrivacyLedger(tuple(events))
