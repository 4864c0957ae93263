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
from fgl_workbench.data.recipe import FederationRecipe
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


@dataclass(frozen=True)
class Served:
    """What a ServerApp's strategy left: the final arrays, Flower's aggregated client metrics
    per round (its ``Result``), the figures of Flower's own accounting."""

    arrays: State
    train_metrics: dict[int, dict[str, float]]
    evaluate_metrics: dict[int, dict[str, float]]
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
    server_seed: int = 0,
    recipe: FederationRecipe | None = None,
) -> FlowerRun:
    """``cfg.rounds`` rounds of Flower's strategy over the clients, in this process
    (``inline``), in Flower's simulation engine (its Ray actors run the ClientApps) or on a
    SuperLink and SuperNodes (``deployment``: the ServerApp seeded with ``server_seed``, as
    this process is, the SuperNodes rebuilding their clients from ``recipe``)."""
    n = len(clients)
    # reference federations hold no validation records: nothing to evaluate on
    validated = any(validation_count(c) > 0 for c in clients)
    initial = global_model.state_dict()
    bound = None  # SecAgg+'s weight bound, from the clients' weights
    if cfg.secure_aggregation == "secaggplus":
        bound = secaggplus.max_weight(cfg, [loop.weight(c) for c in clients], dp)
    if cfg.backend == "deployment":
        from fgl_workbench.targets.flower.deployed import deploy

        served = deploy(
            recipe, clients, spec, cfg, dp, seed, server_seed, validated, transcript, initial, bound
        )
    elif bound is not None:
        served = secure_federation(
            loop, clients, spec, cfg, dp, transcript, seed, initial, validated, bound
        )
    else:
        app = client_app(Clients(loop, clients, spec, cfg, seed), dp, cfg.dp_clipping)

        def run(grid: RecordingGrid) -> Served:
            return serve(grid, cfg, dp, n, validated, initial)

        if cfg.backend == "inline":
            served = run(RecordingGrid(InlineGrid(app, n), transcript, inline_party))
        else:
            served = simulate(app, run, n, cfg, transcript)
    # a deployed ServerApp's record is read as untrusted: its uploads do not lower the count
    uploads = cfg.rounds if cfg.backend == "deployment" else busiest(transcript)
    return FlowerRun(
        served.arrays,
        ledger(cfg, dp, n, uploads, num_params(global_model)),
        history(served, cfg.rounds),
        served.figures,
    )


def serve(
    grid: Any,
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    num_clients: int,
    validated: bool,
    initial: State,
    timeout: float = 3600.0,
) -> Served:
    """The ServerApp's work on ``grid``, whichever engine runs it: Flower's strategy (and
    accountant, under central DP) over ``cfg.rounds`` rounds, each waiting ``timeout``
    seconds for replies."""
    n = num_clients
    privacy.zero_safe_clipping()  # server-side clipping meets idle clients' zero updates
    accountant = privacy.flower_accountant(n) if dp is not None and dp.mode == "central" else None
    server = strategy(cfg, n, dp, accountant, validated)
    result = flower_server(server, grid, initial, cfg.rounds, timeout=timeout)
    return served_by(result, dp, accountant)


def served_by(result: Any, dp: DPFedAvgConfig | None, accountant: Any) -> Served:
    """What Flower's ``Result`` (of either workflow) leaves, with Flower's own ε where its
    accountant was attached and LocalDpMod's stated per-upload ε."""
    figures: dict[str, float] = {}
    if accountant is not None:
        figures["flower_epsilon"] = float(accountant.get_privacy_spent().epsilon)
    if dp is not None and dp.mode == "local":
        figures["flower_epsilon_per_upload"] = privacy.local_dp_mod_epsilon(dp)
    return Served(
        dict(result.arrays.to_torch_state_dict()),
        _by_round(result.train_metrics_clientapp),
        _by_round(result.evaluate_metrics_clientapp),
        figures,
    )


def _by_round(metrics: dict[int, Any]) -> dict[int, dict[str, float]]:
    return {int(r): {k: float(v) for k, v in m.items()} for r, m in metrics.items()}


def secure_federation(
    loop: FedAvgLoop,
    clients: Sequence[Any],
    spec: ModelSpec,
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    transcript: Transcript,
    seed: int,
    initial: State,
    validated: bool,
    bound: float,
) -> Served:
    """The rounds under SecAgg+ (weights bounded by ``bound``): Flower's legacy
    DefaultWorkflow with its SecAggPlusWorkflow, inline or on the simulation engine, every
    message recorded (Flower's legacy DP wrappers take no accountant)."""
    n, names = len(clients), list(initial)
    inner = secaggplus.strategy(cfg, n, dp, initial, validated)
    server = secaggplus.Observed(inner, transcript, names)
    app = secaggplus.client_app(Clients(loop, clients, spec, cfg, seed), dp, names)

    def run(grid: RecordingGrid) -> Served:
        result = secaggplus.run(grid, server, cfg, bound, names, stamp_identity)
        return served_by(result, dp, None)

    if cfg.backend == "inline":
        return run(RecordingGrid(InlineGrid(app, n), transcript, inline_party, names))
    return simulate(app, run, n, cfg, transcript, names)


def simulate(
    app: Any,
    serve: Callable[[RecordingGrid], Served],
    num_clients: int,
    cfg: FlowerConfig,
    transcript: Transcript,
    names: Sequence[str] | None = None,
) -> Served:
    """The federation on Flower's simulation engine: ``run_simulation`` with its Ray backend,
    the ServerApp (in this process) running ``serve`` on a grid recording what it carries
    (``names``: the state dict's keys, for the legacy workflow's Parameters). Which node is
    which client is known only to the nodes: each notes it in a folder the transcript is
    renamed from after the run (the server's view names nodes, as a real server's does)."""
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    results: list[Served] = []
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
    timeout: float = 3600.0,
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
            timeout=timeout,
        )


def stamp_identity() -> None:
    """The task identity Flower stamps messages with, where no Flower runtime set one (the
    simulation and deployment runtimes set their own)."""
    try:
        TaskIdentity.run_id  # noqa: B018
    except RuntimeError:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1


def history(served: Served, rounds: int) -> list[dict[str, float]]:
    """Each round's aggregated client metrics, as Flower's ``Result`` held them."""
    rows = []
    for r in range(1, rounds + 1):
        row: dict[str, float] = {"round": float(r - 1)}
        train = served.train_metrics.get(r, {})
        evaluated = served.evaluate_metrics.get(r, {})
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
