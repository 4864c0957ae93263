"""Canary clients in a Flower federation: Flower's own DP code (its fixed-clipping strategy
wrappers, its ``LocalDpMod``), audited as the built-in DP-FedAvg's games audit it
(``audits.clients``), on what the claim's adversary observes.

Every canary is a Flower node whose ``ClientApp`` answers a train message with the model it
received moved by its update: a random direction ``CANARY_NORM``·clip long, its sign flipping
from round to round in the auditor's pattern. Central DP (zero-out, against other clients and
a querier): an included canary sends its update, an excluded one returns the model unchanged,
Flower's ``FedAvg`` samples its fixed number of nodes with its own draw, the wrapper clips,
averages and noises with Flower's code, and the observer scores every round's global model,
knowing who was sampled (the claim takes no amplification from the draw).
Flower's clipping divides by each update's norm, so an exactly unchanged model crashes its
wrappers (ZeroDivisionError): an excluded canary's model moves by one float32 ulp on a
coordinate the audit never reads. Local DP (replace one, against everyone): every canary
sends +update or −update through ``LocalDpMod`` each round, and the server's view, each noisy
upload, is scored."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fgl_workbench.audits.canary import (
    CANARY_NORM,
    Trial,
    canary_directions,
    flips,
    inclusion,
    trial,
)
from fgl_workbench.audits.canary import (
    Context as AuditContext,
)
from fgl_workbench.audits.clients import Projections, upload_trials
from fgl_workbench.audits.observer import Observed
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.targets.flower import privacy
from fgl_workbench.targets.flower.apps import WEIGHT, client_app_mods, strategy
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.engine import flower_server
from fgl_workbench.targets.flower.grid import FIRST_NODE_ID, InlineGrid

KEY = "w"  # the canaries' model: one flat vector
NUDGE = 1e-15  # the smallest nudge whose square float32 keeps


class FlowerDPGame:
    """Flower's DP under the ``flower`` target's dp-fedavg (``defense`` as the suite names it)."""

    defense = "dp-fedavg"

    def play(
        self, config: DPFedAvgConfig, context: AuditContext, m: int, generator: torch.Generator
    ) -> list[Trial]:
        cfg = FlowerConfig(**{k: v for k, v in context.target.items() if k in FIRST_FIELDS})
        d, nulls, independent = canary_directions(m, context.dimension, generator)
        included = inclusion(m, generator)
        signs = flips(cfg.rounds, m, generator)
        seed = int(torch.randint(0, 2**31, (1,), generator=generator))
        random.seed(seed)  # Flower's node sampling
        np.random.seed(seed)  # Flower's DP noise
        if config.mode == "central":
            return [_central(config, cfg, d, nulls, included, signs, independent)]
        return _local(config, cfg, d, nulls, included, signs, independent)


FIRST_FIELDS = ("rounds", "client_fraction", "dp_clipping", "secure_aggregation")
# a SecAgg+ cell's canaries play Flower's DP code without SecAgg+: its masks cancel in the
# sum, its rounding moves the central claim a hair (left out here), and the local claim is
# per upload, which an observer of every upload audits
UNMASKED = "; SecAgg+ not played (its masks cancel; the claim here leaves out its rounding)"
PER_UPLOAD = "; SecAgg+ not played (the claim is per upload: every upload is observed)"


def _central(config, cfg, d, nulls, included, signs, independent) -> Trial:
    m, dimension = d.shape
    per_round = cfg.per_round(m)
    rounds = cfg.rounds
    observed_round = [0]

    spare = _spare_coordinate(d, nulls)

    sampled = torch.zeros(rounds, m, dtype=torch.bool)  # whom Flower's draw picked

    def update(i: int, received: torch.Tensor) -> torch.Tensor:
        r = observed_round[0]
        sampled[r, i] = True
        if not included[i]:  # zero out: the model it received, as unchanged as Flower allows
            return _nudged(received, spare)
        return received + (signs[r, i] * CANARY_NORM * config.clip * d[i]).float()

    app = _canary_app(update, client_app_mods(config, cfg.dp_clipping))
    server = strategy(cfg.model_copy(update={"report_metrics": False}), m, config, None)
    states = [torch.zeros(dimension)]

    def evaluate(round_: int, arrays: ArrayRecord) -> None:
        states.append(torch.from_numpy(arrays[KEY].numpy()).double())
        observed_round[0] = round_  # the next train round (Flower's rounds count from 1)

    flower_server(server, InlineGrid(app, m), {KEY: states[0]}, rounds, evaluate)
    global_models = torch.stack(states[1:])  # [rounds + 1] incl. the initial model's callback
    moved = (global_models[1:] - global_models[:-1]) * per_round  # each round's noisy sum
    # no amplification is claimed, so the observer may know who was sampled: a canary is
    # scored only on the rounds it took part in
    observed = Observed(moved @ d.T, (moved @ nulls.T)[:, None], signs * sampled, config.clip)
    hidden, _ = privacy.central_events(config, rounds, per_round, m, cfg.dp_clipping)
    how = (
        f"Flower {cfg.dp_clipping}-side fixed clipping, {per_round} of {m} canary clients a "
        f"round, {rounds} rounds, zero-out, every global model"
    ) + (UNMASKED if cfg.secure_aggregation == "secaggplus" else "")
    return trial(observed, included, [hidden], "client", how, independent=independent)


def _spare_coordinate(d: torch.Tensor, nulls: torch.Tensor) -> int:
    """A coordinate no canary or null direction reads (the first, where every one does)."""
    unread = ~((d != 0).any(0) | (nulls != 0).any(0))
    return int(unread.nonzero()[0]) if bool(unread.any()) else 0


def _nudged(received: torch.Tensor, at: int) -> torch.Tensor:
    """The received model with one coordinate moved by one float32 ulp (at least ``NUDGE``):
    Flower's clipping divides by the update's norm, so an update of exactly zero (a client
    returning the model it received) crashes its fixed-clipping wrappers with
    ZeroDivisionError."""
    out = received.clone()
    ulp = torch.nextafter(out[at], torch.tensor(float("inf"))) - out[at]
    out[at] += max(float(ulp), NUDGE)  # the norm squares it: a denormal would vanish
    return out


def _local(config, cfg, d, nulls, included, signs, independent) -> list[Trial]:
    m, dimension = d.shape
    rounds = cfg.rounds
    sign = included.double() * 2 - 1
    own = Projections(rounds, m, d, nulls)
    current = [0]

    def update(i: int, received: torch.Tensor) -> torch.Tensor:
        r = current[0]
        return received + (sign[i] * signs[r, i] * CANARY_NORM * config.clip * d[i]).float()

    app = _canary_app(update, client_app_mods(config, cfg.dp_clipping))
    grid = _UploadGrid(app, m, own, current)
    everyone = cfg.model_copy(update={"report_metrics": False, "client_fraction": 1.0})
    server = strategy(everyone, m, None, None)
    flower_server(server, grid, {KEY: torch.zeros(dimension)}, rounds, None)
    (claim,) = privacy.local_events(config, rounds)
    how = f"Flower LocalDpMod, {m} canary clients, {rounds} rounds, replace one, every upload"
    how += PER_UPLOAD if cfg.secure_aggregation == "secaggplus" else ""
    part = torch.ones(rounds, m, dtype=torch.bool)
    return upload_trials(own, part, signs, config.clip, included, claim, how, independent)


def _canary_app(update, mods: list[Any]) -> ClientApp:
    app = ClientApp()

    @app.train(mods=mods)
    def train(msg: Message, context: Context) -> Message:
        i = int(context.node_config["partition-id"])
        received = torch.from_numpy(msg.content["arrays"][KEY].numpy())
        arrays = ArrayRecord({KEY: update(i, received)})
        metrics = MetricRecord({WEIGHT: 1.0})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return app


class _UploadGrid(InlineGrid):
    """The inline grid, each train reply (the server's view) projected as it arrives."""

    def __init__(self, app: ClientApp, m: int, own: Projections, current: list[int]) -> None:
        super().__init__(app, m)
        self.own, self.current = own, current

    def pull_messages(self, message_ids):
        replies = list(super().pull_messages(message_ids))
        for msg in replies:
            i = msg.metadata.src_node_id - FIRST_NODE_ID
            upload = torch.from_numpy(msg.content["arrays"][KEY].numpy()).double()
            self.own.add(self.current[0], i, upload)
        self.current[0] += bool(replies)
        return replies
