"""The Flower apps the ``flower`` target runs: one ``ClientApp`` whose train and evaluate
handlers run the built-in FedAvg's local training and scoring on the client's own data, and
the strategy, Flower's ``FedAvg`` wrapped in Flower's own DP code when a defense asks."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    FedProx,
    Strategy,
)
from torch import nn

from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.models import ModelSpec
from fgl_workbench.seeding import derive_seed
from fgl_workbench.targets.fedavg.rounds import FedAvgLoop
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.privacy import (
    FLOWER_DELTA,
    local_dp_mod_epsilon,
    zero_safe_clipping,
)
from fgl_workbench.targets.training import make_optimizer, mean_loss, measuring_losses

WEIGHT = "num-examples"  # the key Flower's FedAvg weights replies by
UNMEASURED = float("nan")  # a metric a client has no value of (no training record: no loss)


class Clients:
    """What each client's ``ClientApp`` runs, stateless as Flower's apps are: the model holds
    the arrays it is sent (its module built once per process), the optimizer's state (Adam's
    moments persist across rounds, as in the built-in FedAvg) lives in the node's
    ``context.state``, and each
    (client, round) trains on its own seeded stream, so the numbers do not depend on which
    worker runs it or in what order. Picklable: the simulation engine ships it to its Ray
    actors. ``clients``: every client's data, or (on a SuperNode) its own client's by index."""

    def __init__(
        self,
        loop: FedAvgLoop,
        clients: Sequence[Any] | Mapping[int, Any],
        spec: ModelSpec,
        cfg: FlowerConfig,
        seed: int,
    ) -> None:
        self.loop, self.clients, self.spec, self.cfg = loop, clients, spec, cfg
        self.local_cfg = cfg.local()
        self.seed = seed
        self._built: dict[int, nn.Module] = {}  # each client's module, rebuilt per process

    def __getstate__(self) -> dict[str, Any]:
        """Shipped to the simulation's actors without the modules built here."""
        return {**self.__dict__, "_built": {}}

    def train(self, k: int, msg: Message, context: Context, weighted: bool) -> RecordDict:
        """Client k's reply to a train message: its trained model, its weight and loss
        (Flower's clipping made safe for a zero update here, in the process that runs the
        workbench's own clients, and not in a process that only records a user's app)."""
        zero_safe_clipping()
        state, metrics = self.fit(
            k, msg.content["arrays"].to_torch_state_dict(), msg.content["config"], context, weighted
        )
        return RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord(metrics)})

    def fit(
        self,
        k: int,
        arrays: dict[str, torch.Tensor],
        config: Any,
        context: Context,
        weighted: bool,
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Client k's local training from the global ``arrays`` with the server's ``config``:
        its model, and its metrics (its weight under ``WEIGHT``, its loss). A client holding
        no training record (many clients, few graphs) trains nothing and sends back the model
        it received, with the built-in FedAvg's weight 0 and no loss (NaN, which
        ``weighted_metrics`` skips); under DP it keeps the equal weight 1 every client sends
        (Flower's accounted wrappers refuse 0, and the mean's denominator must not depend on
        the data): it is the zero-out neighbour the ledger's Gaussian is stated for."""
        model = self._model(k, arrays)
        steps: list[torch.Tensor] = []
        if self.loop.num_train(self.clients[k]) > 0:
            steps = self._train(k, model, config, context)
        weight = self.loop.weight(self.clients[k]) if weighted else 1.0
        metrics = {WEIGHT: weight}
        if self.cfg.report_metrics:
            metrics["train_loss"] = mean_loss(steps).get("train_loss", UNMEASURED)
        return model.state_dict(), metrics

    def _train(self, k: int, model: nn.Module, config: Any, context: Context) -> list[torch.Tensor]:
        """Client k's local epochs on ``model``, on the (client, round)'s own stream, its
        optimizer's state carried in ``context``: the losses its steps noted."""
        opt = make_optimizer(self.cfg.optimizer, model, self.cfg.lr, self.cfg.weight_decay)
        if OPTIMIZER in context.state:
            opt.load_state_dict(optimizer_state(context.state[OPTIMIZER], opt))
        stream = derive_seed(self.seed, "flower-client", k, int(config["server-round"]))
        # Flower's FedProx sends proximal-mu (its legacy one, proximal_mu)
        hooks = proximal(model, float(config.get("proximal-mu", config.get("proximal_mu", 0.0))))
        try:
            with torch.random.fork_rng(), measuring_losses() as steps:
                torch.manual_seed(stream)
                generator = torch.Generator().manual_seed(stream)
                self.loop.train_local(model, self.clients[k], opt, self.local_cfg, generator, None)
        finally:  # the module is kept for the next round: its anchors are this round's
            for hook in hooks:
                hook.remove()
        context.state[OPTIMIZER] = optimizer_record(opt)
        return steps

    def evaluate(self, k: int, msg: Message, context: Context) -> RecordDict:
        """Client k's reply to an evaluate message: the model's scores on its validation data."""
        metrics = self.score(k, msg.content["arrays"].to_torch_state_dict())
        return RecordDict({"metrics": MetricRecord(metrics)})

    def score(self, k: int, arrays: dict[str, torch.Tensor]) -> dict[str, float]:
        """The model holding ``arrays`` scored on client k's validation data: its accuracy and
        (under ``WEIGHT``) how many records that is."""
        model = self._model(k, arrays)
        c = self.clients[k]
        with torch.random.fork_rng():  # scoring releases nothing of training's draws
            scores = self.loop.score_each({0: model}, [c], "val")
        return {WEIGHT: float(validation_count(c)), "accuracy": scores["accuracy"]}

    def _model(self, k: int, arrays: dict[str, torch.Tensor]) -> nn.Module:
        """Client k's module holding ``arrays``: built once per process (building a GNN
        costs more than a round of its training), every weight then overwritten."""
        if k not in self._built:
            self._built[k] = self.spec.build()
        model = self._built[k]
        model.load_state_dict(arrays)
        return model


def proximal(model: nn.Module, mu: float) -> list[Any]:
    """FedProx's proximal term on ``model`` (just loaded with the global weights): each
    parameter's gradient gets μ·(w − w_global), the gradient of μ/2·‖w − w_global‖², whatever
    loop and optimizer train it. Returns the hooks, to remove after the round."""
    if mu == 0.0:
        return []
    hooks = []
    for p in model.parameters():
        anchor = p.detach().clone()
        hooks.append(p.register_hook(lambda g, p=p, a=anchor: g + mu * (p.detach() - a)))
    return hooks


def validation_count(c: Any) -> int:
    """A client's validation records: nodes (node level) or graphs (graph level)."""
    return int(c.data.val_mask.sum()) if hasattr(c, "data") else len(c.val)


OPTIMIZER = "optimizer"  # the context.state key of a client's optimizer state


def optimizer_record(opt: torch.optim.Optimizer) -> ArrayRecord:
    """An optimizer's per-parameter state (Adam's step and moments) as an ArrayRecord."""
    arrays = {}
    for i, state in opt.state_dict()["state"].items():
        for name, value in state.items():
            arrays[f"{i}.{name}"] = torch.as_tensor(value).detach().clone()
    return ArrayRecord(arrays)


def optimizer_state(record: ArrayRecord, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer_record``'s inverse, with ``opt``'s own parameter groups."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in record.to_torch_state_dict().items():
        i, name = key.split(".", 1)
        state.setdefault(int(i), {})[name] = value
    return {"state": state, "param_groups": opt.state_dict()["param_groups"]}


def client_app_mods(dp: DPFedAvgConfig | None, clipping: str) -> list[Any]:
    """Flower's own mods a train handler runs under dp-fedavg: ``LocalDpMod`` (local; its
    (ε, δ) chosen so its noise std is σ·C at sensitivity C) or ``fixedclipping_mod``
    (central with client-side clipping)."""
    if dp is not None and dp.mode == "local":
        epsilon = local_dp_mod_epsilon(dp)
        return [LocalDpMod(dp.clip, dp.clip, epsilon, FLOWER_DELTA)]
    if dp is not None and clipping == "client":
        return [fixedclipping_mod]
    return []


def client_app(clients: Clients, dp: DPFedAvgConfig | None, clipping: str) -> ClientApp:
    """The ClientApp: the built-in local training and scoring, Flower's mods on training."""
    mods = client_app_mods(dp, clipping)
    app = ClientApp()
    weighted = dp is None  # Flower's accounted DP path requires equal weights

    @app.train(mods=mods)
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        return Message(clients.train(k, msg, context, weighted), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        return Message(clients.evaluate(k, msg, context), reply_to=msg)

    return app


@contextmanager
def muted_flower() -> Iterator[None]:
    """Flower's info and warnings (a line per client per round) muted while inside."""
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        flwr_log.setLevel(level)


def weighted_metrics(replies: Sequence[tuple[float, Mapping[str, Any]]]) -> dict[str, float]:
    """Each metric's mean weighted by the replies' weights (example counts) over the replies
    that measured it: a NaN (``UNMEASURED``, a client with no training record's loss) is
    skipped, and a metric no reply of positive weight measured is left out, where Flower's
    own mean would turn NaN (0 · NaN) or divide by zero."""
    out = {}
    for key in sorted({k for _, m in replies for k in m}):
        kept = [(w, float(m[key])) for w, m in replies if key in m and math.isfinite(m[key])]
        total = sum(w for w, _ in kept)
        if total > 0:
            out[key] = sum(w * v for w, v in kept) / total
    return out


def aggregate_metrics(records: list[RecordDict], weighting_metric_name: str) -> MetricRecord:
    """``weighted_metrics`` in place of the Message API FedAvg's metric aggregation (the
    weight itself left out, as Flower's leaves it)."""
    rows = []
    for record in records:
        metrics = dict(metrics_of(record))
        rows.append((float(metrics.pop(weighting_metric_name)), metrics))
    return MetricRecord(weighted_metrics(rows))


def metrics_of(record: RecordDict) -> MetricRecord:
    """A reply's one MetricRecord (Flower checks there is one)."""
    return next(iter(record.metric_records.values()))


class ZeroWeightFedAvg(FedAvg):
    """Flower's FedAvg, where a round in which every reply weighs 0 (no sampled client held
    a training record: each sent back the model it was sent) keeps that model, as the
    built-in FedAvg does, where Flower's weighted mean would divide by zero. The round is
    the clients' no-op, not an error: refusing it would fail any run that samples few of
    many clients at random."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self.sent = arrays
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        contents = [m.content for m in replies if not m.has_error()]
        if contents and all(metrics_of(c).get(self.weighted_by_key) == 0 for c in contents):
            return self.sent, self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        return super().aggregate_train(server_round, replies)


class ZeroWeightFedProx(ZeroWeightFedAvg, FedProx):
    """Flower's FedProx, keeping a round in which every reply weighs 0 alike."""


def strategy(
    cfg: FlowerConfig,
    num_clients: int,
    dp: DPFedAvgConfig | None,
    accountant: Any,
    evaluate: bool = True,
) -> Strategy:
    """Flower's FedAvg (or FedProx) sampling ``cfg.per_round`` clients a round (and every client for
    federated evaluation while clients report metrics and ``evaluate``: some client holds
    validation records, as Flower's weighted mean of their metrics divides by their count),
    wrapped in Flower's fixed-clipping DP under central dp-fedavg."""
    m = cfg.per_round(num_clients)
    evaluated = cfg.report_metrics and evaluate
    sampling = {
        "fraction_train": m / num_clients,
        "fraction_evaluate": 1.0 if evaluated else 0.0,
        "min_train_nodes": m,
        "min_evaluate_nodes": num_clients if evaluated else 1,
        "min_available_nodes": num_clients,
    }
    aggregation = {
        "train_metrics_aggr_fn": aggregate_metrics,
        "evaluate_metrics_aggr_fn": aggregate_metrics,
    }
    # weighted by example counts only without DP: the rest send 1, and Flower's accounted
    # wrappers require FedAvg's own aggregate_train
    prox, avg = (ZeroWeightFedProx, ZeroWeightFedAvg) if dp is None else (FedProx, FedAvg)
    with muted_flower():  # its warning that evaluation is off, when it is
        if cfg.strategy == "fedprox":
            fedavg: FedAvg = prox(proximal_mu=cfg.proximal_mu, **sampling, **aggregation)
        else:
            fedavg = avg(**sampling, **aggregation)
    if dp is None or dp.mode == "local":
        return fedavg
    wrapper = (
        DifferentialPrivacyServerSideFixedClipping
        if cfg.dp_clipping == "server"
        else DifferentialPrivacyClientSideFixedClipping
    )
    return wrapper(fedavg, dp.noise_multiplier, dp.clip, m, accountant=accountant)
