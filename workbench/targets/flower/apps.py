"""The Flower apps the ``flower`` target runs: one ``ClientApp`` whose train and evaluate
handlers run the built-in FedAvg's local training and scoring on the client's own data, and
the strategy, Flower's ``FedAvg`` wrapped in Flower's own DP code when a defense asks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    Strategy,
)
from torch import nn

from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.targets.fedavg.rounds import FedAvgLoop
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.privacy import FLOWER_DELTA, local_dp_mod_epsilon
from fgl_workbench.targets.training import make_optimizer, mean_loss, measuring_losses

WEIGHT = "num-examples"  # the key Flower's FedAvg weights replies by


class Clients:
    """Every client's model and optimizer, kept across rounds the way a stateful SuperNode
    keeps them (Adam's moments persist, as in the built-in FedAvg)."""

    def __init__(
        self,
        loop: FedAvgLoop,
        clients: Sequence[Any],
        models: Sequence[nn.Module],
        cfg: FlowerConfig,
        generator: torch.Generator,
    ) -> None:
        self.loop, self.clients, self.models, self.cfg = loop, clients, models, cfg
        self.local_cfg = cfg.local()
        self.opts = [
            make_optimizer(cfg.optimizer, m, cfg.lr, cfg.weight_decay) for m in self.models
        ]
        self.generator = generator
        self.uploads = [0] * len(clients)

    def train(self, k: int, arrays: ArrayRecord, weighted: bool) -> RecordDict:
        """Client k's reply to a train message: its trained model, its weight and loss."""
        model = self.models[k]
        model.load_state_dict(arrays.to_torch_state_dict())
        with measuring_losses() as steps:
            self.loop.train_local(
                model, self.clients[k], self.opts[k], self.local_cfg, self.generator, None
            )
        self.uploads[k] += 1
        weight = self.loop.weight(self.clients[k]) if weighted else 1.0
        metrics = {WEIGHT: weight}
        if self.cfg.report_metrics:
            metrics.update(mean_loss(steps))
        return RecordDict(
            {"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)}
        )

    def evaluate(self, k: int, arrays: ArrayRecord) -> RecordDict:
        """Client k's reply to an evaluate message: the model's scores on its validation data."""
        model = self.models[k]
        model.load_state_dict(arrays.to_torch_state_dict())
        with torch.random.fork_rng():  # scoring releases nothing of training's draws
            scores = self.loop.score_each({0: model}, [self.clients[k]], "val")
        c = self.clients[k]
        count = float(c.data.val_mask.sum()) if hasattr(c, "data") else float(len(c.val))
        return RecordDict(
            {"metrics": MetricRecord({WEIGHT: count, "accuracy": scores["accuracy"]})}
        )


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
        return Message(clients.train(k, msg.content["arrays"], weighted), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        return Message(clients.evaluate(k, msg.content["arrays"]), reply_to=msg)

    return app


def strategy(
    cfg: FlowerConfig, num_clients: int, dp: DPFedAvgConfig | None, accountant: Any
) -> Strategy:
    """Flower's FedAvg sampling ``cfg.per_round`` clients a round (and every client for
    federated evaluation while clients report metrics), wrapped in Flower's fixed-clipping
    DP under central dp-fedavg."""
    m = cfg.per_round(num_clients)
    fedavg = FedAvg(
        fraction_train=m / num_clients,
        fraction_evaluate=1.0 if cfg.report_metrics else 0.0,
        min_train_nodes=m,
        min_evaluate_nodes=num_clients if cfg.report_metrics else 1,
        min_available_nodes=num_clients,
    )
    if dp is None or dp.mode == "local":
        return fedavg
    wrapper = (
        DifferentialPrivacyServerSideFixedClipping
        if cfg.dp_clipping == "server"
        else DifferentialPrivacyClientSideFixedClipping
    )
    return wrapper(fedavg, dp.noise_multiplier, dp.clip, m, accountant=accountant)
