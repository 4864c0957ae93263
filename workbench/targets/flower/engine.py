"""One federation on Flower: the apps, the grid, the rounds, and the ledger of what ran."""

from __future__ import annotations

import tempfile
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
from fgl_workbench.targets.flower import privacy, secaggplus
from fgl_workbench.targets.flower.apps import (
    Clients,
    client_app,
    muted_flower,
    strategy,
    validation_count,
)
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.grid import (
    InlineGrid,
    NotingClientApp,
    RecordingGrid,
    inline_party,
    noted_clients,
)
from fgl_workbench.transcript import MASKED_WEIGHTS, MODEL_WEIGHTS, SERVER, Transcript

State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class FlowerRun:
    """What a federation left: the released (last round's) model, the ledger, per-round
    history and figures (Flower's own ε among them)."""

    arrays: State
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
    seed: int,
) -> FlowerRun:
    """``cfg.rounds`` rounds of Flower's strategy over the clients, in this process
    (``inline``) or in Flower's simulation engine (its Ray actors run the ClientApps)."""
    n = len(clients)
    initial = global_model.state_dict()
    if cfg.secure_aggregation == "secaggplus":  # Flower's legacy DP wrappers take no accountant
        result = secure_federation(loop, clients, spec, cfg, dp, transcript, seed, initial)
        return finished(result, cfg, dp, n, transcript, None, num_params(global_model))
    accountant = privacy.flower_accountant(n) if dp is not None and dp.mode == "central" else None
    # reference federations hold no validation records: nothing to evaluate on
    validated = any(validation_count(c) > 0 for c in clients)
    server = strategy(cfg, n, dp, accountant, validated)
    app = client_app(Clients(loop, clients, spec, cfg, seed), dp, cfg.dp_clipping)

    def serve(grid: RecordingGrid) -> Any:
        return flower_server(server, grid, initial, cfg.rounds)

    if cfg.backend == "inline":
        result = serve(RecordingGrid(InlineGrid(app, n), transcript, inline_party))
    else:
        result = simulate(app, serve, n, cfg, transcript)
    return finished(result, cfg, dp, n, transcript, accountant, num_params(global_model))


def finished(
    result: Any,
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    n: int,
    transcript: Transcript,
    accountant: Any,
    size: int,
) -> FlowerRun:
    """The run's released model, ledger, history and figures (Flower's own ε)."""
    figures: dict[str, float] = {}
    if accountant is not None:
        figures["flower_epsilon"] = float(accountant.get_privacy_spent().epsilon)
    if dp is not None and dp.mode == "local":
        figures["flower_epsilon_per_upload"] = privacy.local_dp_mod_epsilon(dp)
    return FlowerRun(
        dict(result.arrays.to_torch_state_dict()),
        ledger(cfg, dp, n, busiest(transcript), size),
        history(result, cfg.rounds),
        figures,
    )


def secure_federation(
    loop: FedAvgLoop,
    clients: Sequence[Any],
    spec: ModelSpec,
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    transcript: Transcript,
    seed: int,
    initial: State,
) -> Any:
    """The rounds under SecAgg+: Flower's legacy DefaultWorkflow with its SecAggPlusWorkflow,
    inline or on the simulation engine, every message recorded."""
    n, names = len(clients), list(initial)
    validated = any(validation_count(c) > 0 for c in clients)
    inner = secaggplus.strategy(cfg, n, dp, initial, validated)
    server = secaggplus.Observed(inner, transcript, names)
    app = secaggplus.client_app(Clients(loop, clients, spec, cfg, seed), dp, names)
    bound = secaggplus.max_weight(cfg, [loop.weight(c) for c in clients], dp)

    def serve(grid: RecordingGrid) -> Any:
        return secaggplus.run(grid, server, cfg, bound, names, stamp_identity)

    if cfg.backend == "inline":
        return serve(RecordingGrid(InlineGrid(app, n), transcript, inline_party, names))
    return simulate(app, serve, n, cfg, transcript, names)


def simulate(
    app: Any,
    serve: Callable[[RecordingGrid], Any],
    num_clients: int,
    cfg: FlowerConfig,
    transcript: Transcript,
    names: Sequence[str] | None = None,
) -> Any:
    """The federation on Flower's simulation engine: ``run_simulation`` with its Ray backend,
    the ServerApp (in this process) running ``serve`` on a grid recording what it carries
    (``names``: the state dict's keys, for the legacy workflow's Parameters). Which node is
    which client is known only to the nodes: each notes it in a folder the transcript is
    renamed from after the run (the server's view names nodes, as a real server's does)."""
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    results: list[Any] = []
    with tempfile.TemporaryDirectory(prefix="fglwb-flower-") as registry:
        server_app = ServerApp()

        @server_app.main()
        def main(grid: Any, context: Any) -> None:
            results.append(serve(RecordingGrid(grid, transcript, names=names)))

        workers = max(1, min(num_clients, cfg.simulation_workers))
        with muted_flower():
            run_simulation(
                server_app=server_app,
                client_app=NotingClientApp(app, registry),
                num_supernodes=num_clients,
                backend_config={
                    "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                    "init_args": {"num_cpus": workers, "include_dashboard": False},
                },
            )
        parties = noted_clients(registry)
    if not results:
        raise RuntimeError("Flower's simulation ended without running the ServerApp")
    transcript.rename(parties)
    return results[0]


def busiest(transcript: Transcript) -> int:
    """The most model uploads one client made (the server's count of what it received, in
    the clear or masked)."""
    counts: dict[str, int] = {}
    for m in transcript.messages:
        if m.receiver == SERVER and m.kind in (MODEL_WEIGHTS, MASKED_WEIGHTS):
            counts[m.sender] = counts.get(m.sender, 0) + 1
    return max(counts.values(), default=0)


def flower_server(
    server: Any,
    grid: Any,
    initial: State,
    rounds: int,
    evaluate_fn: Callable[[int, ArrayRecord], None] | None = None,
) -> Any:
    """Flower's ``Strategy.start`` as a ServerApp runs it: outside a Flower runtime (the
    inline grid) with the task identity Flower's messages are stamped with set."""
    stamp_identity()
    with muted_flower():
        return server.start(
            grid=grid,
            initial_arrays=ArrayRecord(initial),
            num_rounds=rounds,
            evaluate_fn=evaluate_fn,
        )


def stamp_identity() -> None:
    """The task identity Flower stamps messages with, where no Flower runtime set one (the
    simulation and deployment runtimes set their own)."""
    try:
        TaskIdentity.run_id  # noqa: B018
    except RuntimeError:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1


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
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    num_clients: int,
    busiest: int,
    size: int | None = None,
) -> PrivacyLedger:
    """The run's events: Flower's DP scoped per adversary (SecAgg+'s rounding in the
    sensitivity of central DP, over the model's ``size`` numbers), and the clients'
    metrics."""
    events: list[Any] = []
    if dp is not None and dp.mode == "central":
        m = cfg.per_round(num_clients)
        rounding = None
        if cfg.secure_aggregation == "secaggplus":
            if size is None:
                raise ValueError("size: SecAgg+'s rounding grows with the model's size")
            s = cfg.secaggplus
            bound = secaggplus.max_weight(cfg, (), dp)  # dp-fedavg's clients send weight 1
            rounding = privacy.secagg_rounding(
                s.clipping_range, s.quantization_range, 1.0 / bound, size
            )
        events += privacy.central_events(
            dp, cfg.rounds, m, num_clients, cfg.dp_clipping, rounding=rounding
        )
    elif dp is not None:
        events += privacy.local_events(dp, busiest)
    if dp is not None and cfg.report_metrics:
        kinds = ["training loss", "example counts", "validation accuracy"]
        events.append(privacy.metrics_event(kinds))
    return PrivacyLedger(tuple(events))


def num_params(model: nn.Module) -> int:
    """Every number of the model's state (what SecAgg+ quantises)."""
    return sum(v.numel() for v in model.state_dict().values())
