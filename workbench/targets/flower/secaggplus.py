"""The ``flower`` target under SecAgg+: Flower's ``SecAggPlusWorkflow`` inside its legacy
``DefaultWorkflow``, the only API Flower 1.42 runs SecAgg+ on.

The same clients (``Clients``: the same local training and scoring) answer in Flower's legacy
FitIns/FitRes layout, with ``secaggplus_mod`` outermost on training: it answers the setup,
share-keys and unmask stages itself and, in the collect stage, quantises and masks the trained
model before it leaves the client. The strategy is Flower's legacy FedAvg or FedProx, wrapped in
its legacy client-side fixed-clipping DP wrapper under central dp-fedavg (``fixedclipping_mod``
clips on the client; server-side clipping cannot run: the server never holds an update) or
left bare under local dp-fedavg (legacy ``LocalDpMod`` on the client, inside SecAgg+'s mod).
``Observed`` is the outermost strategy: it records the unmasked aggregate the workflow hands
``aggregate_fit``, which is what the server learns of a round."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.client.mod import LocalDpMod, fixedclipping_mod, secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import (
    Code,
    EvaluateRes,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
)
from flwr.compat.common import recorddict_compat as compat
from flwr.server import ServerConfig
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    FedAvg,
    FedProx,
    Strategy,
)
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_PARAMS_RECORD

from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.flower.apps import WEIGHT, Clients, muted_flower, weighted_metrics
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.grid import legacy_state
from fgl_workbench.targets.flower.privacy import FLOWER_DELTA, local_dp_mod_epsilon
from fgl_workbench.transcript import AGGREGATE, SERVER, Transcript

State = dict[str, torch.Tensor]


def to_parameters(state: State) -> Parameters:
    """A state dict as legacy Parameters (its arrays in the state dict's order)."""
    return ndarrays_to_parameters([v.detach().cpu().numpy() for v in state.values()])


def client_mods(dp: DPFedAvgConfig | None) -> list[Any]:
    """``secaggplus_mod`` outermost (it answers its own stages and calls training only in the
    collect stage), then Flower's legacy DP mod dp-fedavg asks for: ``LocalDpMod`` (local) or
    ``fixedclipping_mod`` (central; the clipping norm comes in the FitIns config)."""
    if dp is None:
        return [secaggplus_mod]
    if dp.mode == "local":
        epsilon = local_dp_mod_epsilon(dp)
        return [secaggplus_mod, LocalDpMod(dp.clip, dp.clip, epsilon, FLOWER_DELTA)]
    return [secaggplus_mod, fixedclipping_mod]


def client_app(clients: Clients, dp: DPFedAvgConfig | None, names: Sequence[str]) -> ClientApp:
    """The ClientApp in the legacy layout: ``Clients``' training and scoring behind
    SecAgg+'s mod."""
    app = ClientApp()
    weighted = dp is None  # Flower's DP wrappers require equal weights

    @app.train(mods=client_mods(dp))
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        state, metrics = clients.fit(
            k, legacy_state(fitins.parameters, names), fitins.config, context, weighted
        )
        count = int(round(metrics.pop(WEIGHT)))
        res = FitRes(Status(Code.OK, ""), to_parameters(state), count, metrics)
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        ins = compat.recorddict_to_evaluateins(msg.content, keep_input=True)
        metrics = clients.score(k, legacy_state(ins.parameters, names))
        count = int(metrics.pop(WEIGHT))
        # the built-in scoring has no validation loss: 1 − accuracy stands in its place
        res = EvaluateRes(Status(Code.OK, ""), 1.0 - metrics["accuracy"], count, metrics)
        return Message(compat.evaluateres_to_recorddict(res), reply_to=msg)

    return app


def strategy(
    cfg: FlowerConfig,
    num_clients: int,
    dp: DPFedAvgConfig | None,
    initial: State,
    evaluate: bool,
) -> Strategy:
    """Flower's legacy FedAvg (or FedProx) sampling ``cfg.per_round`` clients a round, telling
    clients the round, wrapped in the client-side fixed-clipping DP wrapper under central
    dp-fedavg."""
    m = cfg.per_round(num_clients)
    evaluated = cfg.report_metrics and evaluate
    common = {
        "fraction_fit": m / num_clients,
        "fraction_evaluate": 1.0 if evaluated else 0.0,
        "min_fit_clients": m,
        "min_evaluate_clients": num_clients if evaluated else 1,
        "min_available_clients": num_clients,
        "initial_parameters": to_parameters(initial),
        "on_fit_config_fn": lambda r: {"server-round": r},
        "fit_metrics_aggregation_fn": weighted_metrics,
        "evaluate_metrics_aggregation_fn": weighted_metrics,
    }
    if cfg.strategy == "fedprox":
        fedavg: FedAvg = FedProx(proximal_mu=cfg.proximal_mu, **common)
    else:
        fedavg = FedAvg(**common)
    if dp is None or dp.mode == "local":
        return fedavg
    return DifferentialPrivacyClientSideFixedClipping(fedavg, dp.noise_multiplier, dp.clip, m)


class Observed(Strategy):
    """``inner`` with the aggregate the SecAgg+ workflow unmasked written to the transcript as
    what the server holds (``AGGREGATE``, nothing on the wire), before the inner strategy
    (a DP wrapper's noise included) acts on it. A round in which every client weighs 0 (no
    sampled client held a training record; only without DP, where weights are example
    counts) keeps the model it sent, as the built-in FedAvg does: the unmasked sum's total
    weight is 0, and the workflow's division by it leaves no number."""

    def __init__(self, inner: Strategy, transcript: Transcript, names: Sequence[str]) -> None:
        self.inner, self.transcript, self.names = inner, transcript, list(names)
        self.rounds: list[int] = []  # the rounds SecAgg+ completed
        self.sent: Parameters | None = None  # the model this round's clients were sent

    def initialize_parameters(self, client_manager: Any) -> Any:
        return self.inner.initialize_parameters(client_manager)

    def configure_fit(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
        self.sent = parameters
        return self.inner.configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round: int, results: Any, failures: Any) -> Any:
        if not results or failures:
            return self.inner.aggregate_fit(server_round, results, failures)
        idle = all(res.num_examples == 0 for _, res in results)
        # the workflow gives every result the same unmasked weighted mean
        held = self.sent if idle else results[0][1].parameters
        state = legacy_state(held, self.names)
        self.transcript.send(server_round - 1, SERVER, SERVER, AGGREGATE, state, 0)
        self.rounds.append(server_round)
        if idle:
            return held, weighted_metrics([(0, res.metrics) for _, res in results])
        return self.inner.aggregate_fit(server_round, results, failures)

    def configure_evaluate(self, server_round: int, parameters: Any, client_manager: Any) -> Any:
        return self.inner.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round: int, results: Any, failures: Any) -> Any:
        return self.inner.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Any) -> Any:
        return self.inner.evaluate(server_round, parameters)


def max_weight(cfg: FlowerConfig, weights: Sequence[float], dp: DPFedAvgConfig | None) -> float:
    """The weight bound SecAgg+ scales uploads by: the configured one, else the largest weight
    a client sends (1 under dp-fedavg; at least 1, as SecAgg+ refuses 0 and a federation
    without a training record runs, every round keeping its model). A bound below a weight
    sent is refused: the scaled parameters would pass ±clipping_range and the quantised sum
    could wrap around."""
    largest = 1.0 if dp is not None else float(max([1, *(round(w) for w in weights)]))
    bound = cfg.secaggplus.max_weight
    if bound is None:
        return largest
    if bound < largest:
        raise ConfigError(
            f"secaggplus.max_weight: {bound} is below the largest weight a client sends "
            f"({largest:g}); leave it unset or raise it"
        )
    return bound


def workflow(cfg: FlowerConfig, weight_bound: float) -> DefaultWorkflow:
    """Flower's DefaultWorkflow whose fit rounds run SecAgg+."""
    s = cfg.secaggplus
    secagg = SecAggPlusWorkflow(
        s.num_shares,
        s.reconstruction_threshold,
        max_weight=weight_bound,
        clipping_range=s.clipping_range,
        quantization_range=s.quantization_range,
    )
    return DefaultWorkflow(fit_workflow=secagg)


@dataclass(frozen=True)
class LegacyResult:
    """What the legacy workflow left, shaped as the Message API's ``Result`` the engine reads:
    the last global model, and per round the clients' aggregated train and evaluate metrics."""

    arrays: ArrayRecord
    train_metrics_clientapp: dict[int, dict[str, float]]
    evaluate_metrics_clientapp: dict[int, dict[str, float]]


def run(
    grid: Any,
    server: Observed,
    cfg: FlowerConfig,
    weight_bound: float,
    names: Sequence[str],
    stamp: Callable[[], None],
) -> LegacyResult:
    """``cfg.rounds`` rounds of the DefaultWorkflow over ``grid``. Refuses a run in which
    SecAgg+ halted (too few clients answered for its threshold): Flower would go on with the
    model unchanged."""
    stamp()
    context = LegacyContext(
        Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}),
        config=ServerConfig(num_rounds=cfg.rounds),
        strategy=server,
    )
    # a round in which every client weighs 0 unmasks a total weight of 0 and divides by it
    # (numpy: inf, then NaN); Observed keeps the model instead, so the warnings say nothing
    with muted_flower(), np.errstate(divide="ignore", invalid="ignore"):
        workflow(cfg, weight_bound)(grid, context)
    halted = sorted(set(range(1, cfg.rounds + 1)) - set(server.rounds))
    if halted:
        raise RuntimeError(
            f"Flower's SecAgg+ halted in round(s) {halted}: too few clients answered for its "
            "reconstruction_threshold (raise secaggplus.num_shares or lower the threshold)"
        )
    final = compat.arrayrecord_to_parameters(
        context.state.array_records[MAIN_PARAMS_RECORD], keep_input=True
    )
    history = context.history
    return LegacyResult(
        ArrayRecord(legacy_state(final, names)),
        by_round(history.metrics_distributed_fit),
        by_round(history.metrics_distributed),
    )


def by_round(metrics: dict[str, list[tuple[int, Any]]]) -> dict[int, dict[str, float]]:
    """Flower's legacy history (metric → [(round, value)]) as round → metric → value."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for key, values in metrics.items():
        for r, v in values:
            out[r][key] = float(v)
    return dict(out)
