"""The ``flower`` target on Flower's Deployment Engine: its ServerApp and ClientApp packaged as
a Flower app (FAB) that ``flwr run`` submits to a SuperLink, whose SuperNodes run the
ClientApp.

The FAB's one run-config entry (``workbench``) is a ``DeployedRun`` as JSON: how the
federation was cut (``FederationRecipe``), the target's config and defense, the seeds. Each
SuperNode knows which client it is from its own ``node_config`` (``partition-id``,
``num-partitions``) and rebuilds that client's data alone from the recipe and its own data
root, checked against the digest of the workbench's copy, as a real deployment's machine
holds only its own client's data. The ServerApp (in the SuperLink's process tree) reads the
initial model from ``deployment.record_dir``, runs the same strategy and Flower DP wrappers as
inline, seeded as inline seeds this process, and writes what its grid carried back there
(``fgl_workbench.targets.flower.record``: JSON and npz, nothing that runs code when read).

Which node is which client reaches the server as a ``query`` message before the strategy
starts, on the grid the transcript does not record: the experimenter's channel, as the
simulation's noted folder is; the transcript names nodes until it is renamed after the run."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any, Literal
from uuid import uuid4

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.data.federation import GraphClient, NodeClient
from fgl_workbench.data.recipe import FederationRecipe, client_digest
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelSpec
from fgl_workbench.seeding import seed_everything
from fgl_workbench.targets.fedavg.graph import GraphFedAvg
from fgl_workbench.targets.fedavg.node import NodeFedAvg
from fgl_workbench.targets.flower import secaggplus
from fgl_workbench.targets.flower.apps import Clients
from fgl_workbench.targets.flower.apps import client_app as workbench_client_app
from fgl_workbench.targets.flower.config import LOCAL, FlowerConfig
from fgl_workbench.targets.flower.engine import Served, State, serve, served_by
from fgl_workbench.targets.flower.grid import RecordingGrid, node_party
from fgl_workbench.targets.flower.privacy import local_dp_mod_epsilon
from fgl_workbench.targets.flower.record import (
    FAILED,
    INITIAL,
    RecordError,
    ServerRecord,
    read,
    read_record,
    write,
    write_failure,
    write_record,
)
from fgl_workbench.targets.flower.superlink import (
    Connection,
    DeploymentError,
    connect,
    local_deployment,
    run_app,
)
from fgl_workbench.transcript import METRICS, Transcript, client

RUN_KEY = "workbench"  # the FAB's run-config entry holding the DeployedRun


class DeployedRun(BaseModel):
    """Everything the apps need beyond their code, as plain data in the run config."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    federation: FederationRecipe
    digests: list[str]  # client k's data as the workbench holds it (``client_digest``)
    target: FlowerConfig
    defense: DPFedAvgConfig | None
    in_dim: int
    num_classes: int
    level: Literal["node", "graph"]
    seed: int  # the clients' training streams (their DP noise is drawn from fresh entropy)
    record_dir: str
    validated: bool  # some client holds validation records: evaluate each round
    names: list[str]  # the model's state-dict keys: the legacy (SecAgg+) layout's by position
    weight_bound: float | None = Field(gt=0)  # SecAgg+'s max_weight, from the clients' weights

    def spec(self) -> ModelSpec:
        return ModelSpec(self.target.model, self.in_dim, self.num_classes, self.level)


@cache
def _parsed(raw: str) -> DeployedRun:
    return DeployedRun.model_validate_json(raw)


def request(context: Context) -> DeployedRun:
    return _parsed(str(context.run_config[RUN_KEY]))


# ---- the SuperNodes' side


@cache
def own_client(raw: str, k: int) -> NodeClient | GraphClient:
    """Client k's data rebuilt on this machine, refused unless it is the workbench's."""
    run = _parsed(raw)
    n = run.federation.num_clients
    if not 0 <= k < n:
        raise ConfigError(f"node_config partition-id: {k} is not a client of 0..{n - 1}")
    own = run.federation.client(k)
    if client_digest(own) != run.digests[k]:
        raise ConfigError(
            f"client {k}'s data rebuilt on this SuperNode differs from the workbench's "
            f"(dataset {run.federation.dataset!r} read from this machine's FGLWB_DATA): "
            "both must hold the same dataset files"
        )
    return own


class DeployedClientApp(ClientApp):
    """The workbench's ClientApp for the node's own client: a ``query`` answered with the
    client the node is, train and evaluate by ``apps.client_app`` (Flower's DP mods
    included)."""

    def __call__(self, message: Message, context: Context) -> Message:
        raw = str(context.run_config[RUN_KEY])
        run = _parsed(raw)
        k = int(context.node_config["partition-id"])
        n = int(context.node_config.get("num-partitions", run.federation.num_clients))
        if n != run.federation.num_clients:
            raise ConfigError(
                f"node_config num-partitions: {n}, but the federation has "
                f"{run.federation.num_clients} clients"
            )
        own = own_client(raw, k)
        if message.metadata.message_type == MessageType.QUERY:
            return Message(
                RecordDict({"node": ConfigRecord({"partition-id": k})}), reply_to=message
            )
        seed_everything(run.seed)  # deterministic kernels, as the workbench's process runs them
        # LocalDpMod draws from numpy's global generator: from this node's own entropy, never
        # from a seed in the run config, which every node and the server read (a shared seed
        # gave every client the same noise, and the server could redraw it)
        np.random.seed()
        loop = NodeFedAvg() if run.level == "node" else GraphFedAvg()
        clients = Clients(loop, {k: own}, run.spec(), run.target, run.seed)
        if run.target.secure_aggregation == "secaggplus":
            app = secaggplus.client_app(clients, run.defense, run.names)
        else:
            app = workbench_client_app(clients, run.defense, run.target.dp_clipping)
        return app(message, context)


client_app = DeployedClientApp()


# ---- the ServerApp's side

server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """The federation as inline runs it, its record (or its failure) written for the
    workbench."""
    run = request(context)
    folder = Path(run.record_dir)
    try:
        write_record(folder, server_side(grid, run, folder))
    except BaseException as exc:
        write_failure(folder, exc)
        raise


def server_side(grid: Grid, run: DeployedRun, folder: Path) -> ServerRecord:
    # the server's seed (Flower's sampling and central DP noise) comes from the record folder,
    # on the server's side, not from the run config every SuperNode reads: a client that knew
    # it could redraw the noise and subtract it
    start = read(folder, INITIAL)
    if not isinstance(start, dict) or not isinstance(start.get("model"), dict):
        raise RecordError(f"{folder / INITIAL}: not a state dict and a seed")
    if not isinstance(start.get("seed"), int):
        raise RecordError(f"{folder / INITIAL}: no integer seed")
    seed_everything(start["seed"])
    # Flower's central DP noise comes from numpy's global generator: from fresh entropy, as
    # on the SuperNodes; a 32-bit seed could be searched by a client holding the noised model
    np.random.seed()
    initial = start["model"]
    cfg, n = run.target, run.federation.num_clients
    nodes = identify(grid, n, cfg.deployment.connect_timeout, cfg.deployment.round_timeout)
    transcript = Transcript(cfg.keep_payloads, always_keep=(METRICS,))
    if cfg.secure_aggregation == "secaggplus":
        served = secure_side(grid, run, transcript, initial)
    else:
        served = serve(
            StrictGrid(grid, transcript),
            cfg,
            run.defense,
            n,
            run.validated,
            initial,
            cfg.deployment.round_timeout,
        )
    return ServerRecord(
        list(transcript.messages),
        served.arrays,
        served.train_metrics,
        served.evaluate_metrics,
        served.figures,
        {node_party(node): client(k) for node, k in nodes.items()},
    )


def secure_side(grid: Grid, run: DeployedRun, transcript: Transcript, initial: State) -> Served:
    """The rounds under SecAgg+, as ``engine.secure_federation`` runs them inline: Flower's
    legacy DefaultWorkflow with its SecAggPlusWorkflow on the SuperLink's grid, every stage
    recorded, the unmasked aggregate too."""
    cfg, n, names = run.target, run.federation.num_clients, run.names
    if run.weight_bound is None:
        raise RecordError("the run names no SecAgg+ weight bound")
    if run.names != list(initial):
        raise RecordError("the run's model names are not the initial model's")
    inner = secaggplus.strategy(cfg, n, run.defense, initial, run.validated)
    server = secaggplus.Observed(inner, transcript, names)
    strict = StrictGrid(grid, transcript, node_party, names)
    result = secaggplus.run(strict, server, cfg, run.weight_bound, names, lambda: None)
    return served_by(result, run.defense, None)


def identify(grid: Grid, n: int, connect_timeout: float, timeout: float) -> dict[int, int]:
    """Node id → client, once ``n`` SuperNodes are connected, each asked which it is."""
    deadline = time.monotonic() + connect_timeout
    while len(ids := list(grid.get_node_ids())) < n:
        if time.monotonic() > deadline:
            raise DeploymentError(
                f"{len(ids)} of {n} SuperNodes connected after {connect_timeout:g} s "
                "(deployment.connect_timeout): start one per client with --node-config "
                f"'partition-id=K num-partitions={n}'"
            )
        time.sleep(1.0)
    if len(ids) > n:
        raise DeploymentError(f"{len(ids)} SuperNodes are connected for {n} clients")
    messages = [Message(RecordDict(), dst_node_id=i, message_type=MessageType.QUERY) for i in ids]
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    failed = [f"node {r.metadata.src_node_id}: {r.error.reason}" for r in replies if r.has_error()]
    if failed:
        raise DeploymentError("SuperNodes could not take part: " + "; ".join(failed))
    held = {
        r.metadata.src_node_id: int(r.content["node"]["partition-id"])  # type: ignore[index,arg-type]
        for r in replies
    }
    if sorted(held.values()) != list(range(n)):
        raise DeploymentError(
            f"the SuperNodes hold partitions {sorted(held.values())}; expected each of "
            f"0..{n - 1} once (--node-config 'partition-id=K num-partitions={n}')"
        )
    return held


class StrictGrid(RecordingGrid):
    """A recording grid on which a round whose replies are not all there stops the run:
    Flower's strategies aggregate whatever came back, and a model averaged over fewer clients
    than the ledger and the inline run assume would pass unnoticed."""

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Message]:
        sent = list(messages)
        replies = list(super().send_and_receive(sent, timeout=timeout))
        failed = [
            f"node {r.metadata.src_node_id}: {r.error.reason}" for r in replies if r.has_error()
        ]
        if failed:
            raise DeploymentError("a ClientApp failed: " + "; ".join(failed))
        if len(replies) < len(sent):
            raise DeploymentError(
                f"{len(sent) - len(replies)} of {len(sent)} nodes did not reply within "
                f"{timeout:g} s (deployment.round_timeout)"
            )
        return replies


# ---- the workbench's side


def deploy(
    recipe: FederationRecipe | None,
    clients: Any,
    spec: ModelSpec,
    cfg: FlowerConfig,
    dp: DPFedAvgConfig | None,
    seed: int,
    server_seed: int,
    validated: bool,
    transcript: Transcript,
    initial: State,
    weight_bound: float | None = None,
) -> Served:
    """The federation submitted with ``flwr run`` to the configured SuperLink (or to one
    started here with a SuperNode per client), its record read back into ``transcript``
    (``weight_bound``: SecAgg+'s max_weight, under it)."""
    if cfg.secure_aggregation == "secaggplus" and (weight_bound is None or weight_bound <= 0):
        raise ConfigError(f"secaggplus.max_weight: {weight_bound} is not a positive bound")
    if recipe is None:
        raise ConfigError(
            "backend: deployment rebuilds each client's data on its SuperNode from how the "
            "federation was cut, and this federation does not say (a suite's cells do; build "
            "one with fgl_workbench.data.recipe.FederationRecipe(...).build())"
        )
    d = cfg.deployment
    with tempfile.TemporaryDirectory(prefix="fglwb-deploy-") as tmp:
        work = Path(tmp)
        folder = (Path(d.record_dir) if d.record_dir else work) / f"record-{uuid4().hex}"
        folder.mkdir(parents=True)
        try:
            run = DeployedRun(
                federation=recipe,
                digests=[client_digest(c) for c in clients],
                target=cfg,
                defense=dp,
                in_dim=spec.in_dim,
                num_classes=spec.num_classes,
                level=spec.level,  # type: ignore[arg-type]
                seed=seed,
                record_dir=str(folder.resolve()),
                validated=validated,
                names=list(initial),
                weight_bound=weight_bound,
            )
            write(folder, INITIAL, {"model": initial, "seed": server_seed})
            app = write_app(work / "app", run)
            if d.superlink == LOCAL:
                with local_deployment(work, len(clients), d.connect_timeout) as conn:
                    submit(conn, app, folder, d.run_timeout)
            else:
                submit(connect(work, d.superlink, d.root_certificates), app, folder, d.run_timeout)
            record = read_record(folder, *record_limits(cfg, len(clients), initial))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    transcript.absorb(Transcript.of(record.messages), 0)
    transcript.rename(record.nodes)
    # the record is the ServerApp's word: only Flower's accountant's ε is taken from it (as
    # the server computed it); what the workbench can compute itself, it does
    accounted = dp is not None and dp.mode == "central" and cfg.secure_aggregation == "none"
    figures = {k: v for k, v in record.figures.items() if k == "flower_epsilon" and accounted}
    if dp is not None and dp.mode == "local":
        figures["flower_epsilon_per_upload"] = local_dp_mod_epsilon(dp)
    return Served(record.arrays, record.train_metrics, record.evaluate_metrics, figures)


def record_limits(cfg: FlowerConfig, num_clients: int, initial: State) -> tuple[int, int]:
    """The most bytes an honest record can take, its arrays and its JSON: every round's model
    sent (once, for training and for evaluation) and every client's upload, in float64, twice
    over, with the final model, and under SecAgg+ 4 KiB for each pair of clients a round (its
    keys and encrypted shares); at most 4 messages per client and round of 16 KiB of JSON
    each. A record claiming more (a decompression bomb, JSON that parses into gigabytes) is
    refused unread."""
    model = sum(v.numel() for v in initial.values()) * 8
    arrays = 2 * (cfg.rounds + 1) * (num_clients + 2) * model + (1 << 20)
    if cfg.secure_aggregation == "secaggplus":  # keys and shares, a few hundred bytes each
        arrays += (cfg.rounds + 1) * (num_clients + 1) ** 2 * (1 << 12)
    text = (1 << 14) * (cfg.rounds + 1) * (4 * num_clients + 4) + (1 << 20)
    return arrays, text


def submit(conn: Connection, app: Path, folder: Path, timeout: float) -> None:
    """``flwr run`` of the app; a failed run raised with the ServerApp's own reason first."""
    try:
        run_app(conn, app, timeout)
    except DeploymentError as exc:
        if (folder / FAILED).is_file():
            try:
                read_record(folder, 0, 0)  # its failure only: no record is read on
            except RecordError as reason:
                raise DeploymentError(f"{reason}\n{exc}") from None
        raise


PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fglwb-flower"
version = "1.0.0"
description = "The fgl-workbench flower target's ServerApp and ClientApp"
# the SuperLink and SuperNodes must have fgl-workbench[flower] installed already: the
# workbench's local SuperLink runs with --disable-runtime-dependency-installation
dependencies = ["fgl-workbench"]

[tool.flwr.app]
publisher = "fgl-workbench"

[tool.flwr.app.components]
serverapp = "fgl_workbench.targets.flower.deployed:server_app"
clientapp = "fgl_workbench.targets.flower.deployed:client_app"

[tool.flwr.app.config]
{key} = {value}
"""


def write_app(folder: Path, run: DeployedRun) -> Path:
    """The Flower app folder ``flwr run`` builds the FAB from, the run baked into its
    config (a JSON string is a TOML basic string)."""
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        PYPROJECT.format(key=RUN_KEY, value=json.dumps(run.model_dump_json()))
    )
    return folder
