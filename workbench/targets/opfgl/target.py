"""The O-pFGL target (Yan et al.): personalised FGL in one upload and one download.

Each client propagates its features (H = [X ‖ ÂX ‖ …]), adds reliably pseudo-labelled nodes
(HRE), and uploads its class statistics once. The server pools them and fits a global
surrogate graph (at most 300 nodes) that it sends to every client. Each client trains the
shared initial model on the surrogate (stage 1), then fine-tunes it on its own graph with
node-adaptive distillation from the stage-1 teacher (stage 2). Decisions the paper leaves
open are the official code's, each a config switch: docs/methods/opfgl.md.

Aggregation protocols (chosen by the defenses): in the clear, the server receives each
client's (n, μ, σ) per class; ``masked-aggregation``, pairwise-masked sums (it learns only
the pooled sums and builds the surrogate); ``secure-aggregation``, CKKS ciphertexts it adds
and sends back, so that the clients decrypt the pooled sums and build the surrogate
themselves (the paper's server-efficient variant, App. G): the server learns nothing.

Modes: ``opfgl``; ``stage1``, the surrogate-trained model alone (the paper's "global");
``standalone``, local training only from the same initial model (no upload, no download).
The released models are the clients' personalised ones; a querier reaches each client's
nodes through that client's model. ``transductive: false`` hides every client's test nodes
from all of its training (statistics, expansion, distillation), so they are truly unseen."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch_geometric.data import Data
from torch_geometric.utils import degree, subgraph

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation, NodeClient
from fgl_workbench.defenses.masked_aggregation import MaskedAggConfig, dropouts, secure_sum
from fgl_workbench.defenses.secure_aggregation import SecureAggConfig, Session
from fgl_workbench.defenses.statistics_noise import (
    StatisticsNoiseConfig,
    clipped_rows,
    ledger_event,
    noise,
)
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.query import OwnerRoutedQueryAPI
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.base import TARGETS, TrainedTarget, check_node_target
from fgl_workbench.targets.class_statistics import propagate
from fgl_workbench.targets.fine_tuning import StageConfig, supervised_loss, train_stage
from fgl_workbench.targets.opfgl.expansion import (
    ExpansionConfig,
    class_homophily,
    distillation_weights,
    label_propagation,
    reliable_nodes,
)
from fgl_workbench.targets.opfgl.stages import fine_tuning_loss, surrogate_loss
from fgl_workbench.targets.opfgl.statistics import (
    Denominator,
    Sums,
    class_sums,
    pooled,
    pooled_direct,
    statistics_from_sums,
)
from fgl_workbench.targets.opfgl.surrogate import SurrogateConfig, SurrogateGraph, build_surrogate
from fgl_workbench.targets.training import TrainingRecipe, node_logits, score_personalised
from fgl_workbench.transcript import (
    CIPHERTEXT,
    CLASS_STATISTICS,
    PUBLIC_KEY,
    SERVER,
    SURROGATE_GRAPH,
    KeepPayloads,
    Transcript,
    client,
)

SUPPORTED = ("statistics-noise", "masked-aggregation", "secure-aggregation")


class OPFGLConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Literal["opfgl", "stage1", "standalone"] = "opfgl"
    hops: int = Field(1, ge=0, le=8, description="K of H = [X ‖ ÂX ‖ … ‖ Â^K X]")
    min_count: int = Field(2, ge=1, description="least nodes of a class for it to be uploaded")
    denominator: Denominator = Field("unbiased", description="pooled variance: N−1, or N−m")
    expansion: ExpansionConfig = ExpansionConfig()
    surrogate: SurrogateConfig = SurrogateConfig()
    model: ModelConfig = ModelConfig(arch="gcn", hidden=64, dropout=0.0)
    stage1: StageConfig = StageConfig(lr=1e-4)
    stage2: StageConfig = StageConfig(lr=5e-5)
    distill_scale: float = Field(0.2, ge=0.0, description="a of λ_v (0: plain fine-tuning)")
    lambda_min: float = Field(0.0, ge=0.0)
    lambda_max: float = Field(0.15, ge=0.0)
    transductive: bool = Field(True, description="false: test nodes unseen in training")
    statistics_from: Literal["train", "validation"] = Field(
        "train",
        description="the labelled nodes the statistics start from; validation: the training "
        "nodes (the members) are removed from the clients' graphs, so none enters the upload, "
        "the surrogate or stage 1: a member-free negative control (needs release: stage1)",
    )
    release: Literal["personalised", "stage1"] = Field(
        "personalised",
        description="the models the clients deploy: their personalised ones, or the stage-1 "
        "models trained on the surrogate alone (a membership attack's negative control)",
    )
    keep_payloads: KeepPayloads = "all"

    @model_validator(mode="after")
    def _control_releases_stage1(self) -> OPFGLConfig:
        if self.statistics_from == "validation" and "stage1" not in (self.mode, self.release):
            raise ValueError(
                "statistics_from: 'validation' removes the training nodes, so there is no stage "
                "2 to train; set release: stage1 (or mode: stage1)"
            )
        return self


@dataclass(frozen=True)
class ClientPrep:
    """What a client computes before the upload, from its training graph alone."""

    graph: Data  # the training graph (test nodes removed when inductive)
    sums: Sums
    original_counts: np.ndarray  # labelled nodes per class before the expansion
    expanded: int  # nodes HRE added
    weights: torch.Tensor  # λ_v per node of ``graph``


def training_graph(c: NodeClient, cfg: OPFGLConfig) -> Data:
    """The client's graph as its training sees it: without its test nodes when inductive,
    without its training nodes in the member-free control."""
    keep = torch.ones(c.num_nodes, dtype=torch.bool)
    if not cfg.transductive:
        keep &= ~c.data.test_mask
    if cfg.statistics_from == "validation":
        keep &= ~c.data.train_mask
    if bool(keep.all()):
        return c.data
    edge_index, _ = subgraph(keep, c.data.edge_index, relabel_nodes=True, num_nodes=c.num_nodes)
    return Data(
        x=c.data.x[keep],
        edge_index=edge_index,
        y=c.data.y[keep],
        train_mask=c.data.train_mask[keep],
        val_mask=c.data.val_mask[keep],
        test_mask=torch.zeros(int(keep.sum()), dtype=torch.bool),
    )


def prepare(
    graph: Data,
    num_classes: int,
    cfg: OPFGLConfig,
    noisy: StatisticsNoiseConfig | None,
    rng: np.random.Generator,
) -> ClientPrep:
    """Propagation, expansion, the class sums (noised under ``statistics-noise``) and the
    distillation weights."""
    n, y = graph.num_nodes, graph.y
    labelled = graph.val_mask if cfg.statistics_from == "validation" else graph.train_mask
    lp = label_propagation(
        graph.edge_index,
        n,
        y,
        labelled,
        num_classes,
        cfg.expansion.lp_iters,
        cfg.expansion.lp_alpha,
    )
    hom = class_homophily(graph.edge_index, y, labelled, num_classes)
    deg = degree(graph.edge_index[0], n).numpy(force=True)
    grown = reliable_nodes(lp, deg, ~labelled.numpy(force=True), hom, cfg.expansion)
    rows = np.concatenate([np.flatnonzero(labelled.numpy(force=True)), grown.nodes])
    labels = np.concatenate([y[labelled].numpy(force=True), grown.labels])
    h = propagate(graph.x.double(), graph.edge_index, cfg.hops).numpy(force=True)[rows]
    if noisy is None:
        sums = class_sums(h, labels, num_classes, cfg.min_count)
    else:  # noise on every class's sums; the threshold then reads the noisy count
        raw = class_sums(clipped_rows(h, noisy), labels, num_classes, 1)
        s0 = raw.s0 + noise(raw.s0.shape, noisy, rng)
        kept = (s0 >= cfg.min_count)[:, None]
        sums = Sums(
            s0 * kept[:, 0],
            kept[:, 0].astype(np.float64),
            (raw.s1 + noise(raw.s1.shape, noisy, rng)) * kept,
            (raw.s2 + noise(raw.s2.shape, noisy, rng)) * kept,
        )
    original = np.bincount(y[labelled].numpy(force=True), minlength=num_classes).astype(np.float64)
    weights = distillation_weights(lp, hom, cfg.distill_scale, cfg.lambda_min, cfg.lambda_max)
    return ClientPrep(graph, sums, original, int(grown.nodes.size), weights)


class OPFGL:
    name = "opfgl"
    level = "node"
    Config = OPFGLConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        check_node_target(
            self.name, federation, defenses, SUPPORTED, "its clients upload class statistics once"
        )
        cfg = config if isinstance(config, OPFGLConfig) else OPFGLConfig(**(config or {}))
        protocols = [d.name for d in defenses if d.stage == "aggregation"]
        if len(protocols) > 1:
            raise ConfigError("defenses: choose one of masked-aggregation, secure-aggregation")
        noisy = next((d.config for d in defenses if d.name == "statistics-noise"), None)
        ds = federation.dataset
        assert isinstance(ds, NodeDataset)
        clients: tuple[NodeClient, ...] = federation.clients  # type: ignore[assignment]
        c_count, d = ds.num_classes, ds.num_features
        seed_everything(derive_seed(seed, "opfgl"))
        rng = np.random.default_rng(derive_seed(seed, "opfgl/statistics"))
        spec = ModelSpec(cfg.model, d, c_count, "node")
        initial = spec.build()  # the one initialisation the server sends with the surrogate
        transcript = Transcript(cfg.keep_payloads)
        preps = [prepare(training_graph(c, cfg), c_count, cfg, noisy, rng) for c in clients]
        surrogate, keys = None, None
        if cfg.mode != "standalone":
            protocol = protocols[0] if protocols else "clear"
            config_of = {x.name: x.config for x in defenses}
            churn = np.random.default_rng(derive_seed(seed, "opfgl/dropout"))
            total, original, keys = exchange(
                preps, protocol, config_of.get(protocol), transcript, churn
            )
            pool = (
                pooled_direct([statistics_from_sums(p.sums, d) for p in preps], cfg.denominator)
                if protocol == "clear"
                else pooled(total, cfg.denominator)
            )
            gen = seeded_generator(derive_seed(seed, "opfgl/surrogate"))
            surrogate = build_surrogate(pool, original, d, cfg.hops, cfg.surrogate, gen)
            if protocol != "secure-aggregation":  # built by the server, sent to every client
                for k in range(len(clients)):
                    transcript.send(1, SERVER, client(k), SURROGATE_GRAPH, surrogate.as_payload())
        stage1, personalised = {}, {}
        for k, prep in enumerate(preps):
            stage1[k], personalised[k] = self._train(initial, prep, surrogate, cfg)
        released = stage1 if cfg.release == "stage1" else personalised
        utility = {
            **score_personalised(personalised, clients),
            **{f"stage1_{m}": v for m, v in score_personalised(stage1, clients).items()},
            "expanded_nodes": float(sum(p.expanded for p in preps)),
        }
        if surrogate is not None:
            utility.update(
                surrogate_alignment=surrogate.alignment,
                surrogate_nodes=float(surrogate.y.numel()),
                surrogate_edges=float(surrogate.edge_index.shape[1] // 2),
            )
        owner = federation.partition.owner(ds.num_items)
        return TrainedTarget(
            name=self.name,
            level="node",
            global_model=stage1[0],
            client_models=released,
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                cfg.model_dump(),
                len(clients),
                sum(int(c.data.train_mask.sum()) for c in clients),
                tuple(defenses),
            ),
            query=OwnerRoutedQueryAPI(released, ds.data, owner),
            transcript=transcript,
            ledger=PrivacyLedger()
            if noisy is None
            else PrivacyLedger().record(ledger_event(noisy)),
            utility=utility,
            keys=keys,
        )

    @staticmethod
    def _train(initial, prep: ClientPrep, surrogate: SurrogateGraph | None, cfg: OPFGLConfig):
        """(stage-1 model, released model) of one client."""
        model = copy.deepcopy(initial)
        if surrogate is None:  # standalone: local training from the shared initialisation
            trained = train_stage(model, supervised_loss(prep.graph), prep.graph, cfg.stage2).model
            return trained, trained
        first = train_stage(model, surrogate_loss(surrogate), prep.graph, cfg.stage1).model
        if cfg.mode == "stage1":
            return first, first
        teacher = node_logits(first, prep.graph)
        second = copy.deepcopy(first)
        loss = fine_tuning_loss(prep.graph, teacher, prep.weights)
        return first, train_stage(second, loss, prep.graph, cfg.stage2).model


def exchange(
    preps: Sequence[ClientPrep],
    protocol: str,
    config: Any,
    transcript: Transcript,
    churn: np.random.Generator,
) -> tuple[Sums, np.ndarray, Any]:
    """The one upload (and, under CKKS, the encrypted aggregate's one download) recorded in
    the transcript; returns the pooled sums and original counts as their user learns them
    (the server in the clear and under masks, the clients under CKKS) and the clients' CKKS
    key, if any. ``churn`` picks the clients that drop out under masks; the sum is then the
    survivors'."""
    classes, keys = preps[0].sums.s0.size, None
    vectors = [np.concatenate([p.sums.flat(), p.original_counts]) for p in preps]
    if protocol == "clear":
        for k, p in enumerate(preps):
            stats = statistics_from_sums(p.sums, p.graph.num_features)
            payload = {**stats.as_payload(), "original_counts": torch.as_tensor(p.original_counts)}
            transcript.send(0, client(k), SERVER, CLASS_STATISTICS, payload)
        total = np.sum(vectors, axis=0)
    elif protocol == "masked-aggregation":
        cfg = config or MaskedAggConfig()
        dropped = dropouts(len(preps), cfg, churn)
        total, _ = secure_sum(vectors, cfg, transcript, dropped)
    else:
        session = Session.start(config or SecureAggConfig())
        transcript.send(-1, client(0), SERVER, PUBLIC_KEY, session.keys.public_context)
        sealed = [session.client.encrypt(v) for v in vectors]
        for k, s in enumerate(sealed):
            transcript.send(0, client(k), SERVER, CIPHERTEXT, s)
        aggregate = session.server.sum(sealed, vectors[0].size)
        for k in range(len(preps)):
            transcript.send(1, SERVER, client(k), CIPHERTEXT, aggregate)
        keys = session.keys
        total = keys.decrypt(aggregate)
    return Sums.from_flat(total[:-classes], classes), total[-classes:], keys


TARGETS.register("opfgl")(OPFGL())
