"""Centralised training: one model on the pooled data of every client, the non-federated
baseline membership-inference papers report (e.g. Olatunji et al.'s Cora GCN).

The pooled node-level graph is the subgraph induced by all clients' nodes, cut edges
included (a central party holds every edge); members and non-members are the same records
as in the federated cells, so attack figures compare directly. The released model is the
best-validation epoch's. No messages are exchanged, so the transcript is empty.

``inductive`` trains on the subgraph the training nodes induce instead (Olatunji et al.'s
inductive target): neither a non-member's features nor its edges reach training, which is
the setting their membership figures assume."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import Dataset, NodeDataset
from fgl_workbench.data.federation import Federation, GraphClient, NodeClient, node_client
from fgl_workbench.data.partition import ClientPart
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.progress import report_round
from fgl_workbench.query import GraphQueryAPI, InductiveQueryAPI, NodeQueryAPI, serve
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.training import (
    Release,
    ReleaseRule,
    TrainingRecipe,
    make_optimizer,
    mean_loss,
    measuring_losses,
    score_graph_clients,
    score_node_clients,
    source_aucs,
    train_graph_epochs,
    train_node_epochs,
)
from fgl_workbench.transcript import Transcript


class CentralizedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: ModelConfig = ModelConfig()
    epochs: int = Field(200, ge=1, le=100_000)
    lr: float = Field(0.01, gt=0.0, le=10.0)
    weight_decay: float = Field(5e-4, ge=0.0)
    optimizer: Literal["adam", "sgd"] = "adam"
    batch_size: int = Field(32, ge=1, description="graph level only")
    release: ReleaseRule = Field("best_val", description="best_val or last epoch's model")
    inductive: bool = Field(
        False,
        description="node level: train on the subgraph induced by the training nodes, so "
        "training never sees a non-member (Olatunji et al.'s target); scored on the whole "
        "graph, queried as serves_on says",
    )
    serves_on: Literal["population", "tstf", "tsts"] = Field(
        "population",
        description="node level: the graph the released model answers on: the population's; "
        "tstf: a training node on the graph the training nodes induce, any other on the "
        "population's; tsts: the others on the graph they induce (Olatunji et al.'s settings)",
    )


SPLITS = ("ids", "train", "val", "test")


def pooled_client(federation: Federation) -> NodeClient | GraphClient:
    ds = federation.dataset
    if isinstance(ds, NodeDataset):
        parts = federation.partition.clients
        ids = {f: np.sort(np.concatenate([getattr(c, f) for c in parts])) for f in SPLITS}
        inductive = federation.partition.membership == "inductive"
        return node_client(ds, ClientPart(0, **ids), inductive)
    graphs = {f: [g for c in federation.clients for g in getattr(c, f)] for f in SPLITS[1:]}
    return GraphClient(0, **graphs)


def _check_settings(cfg: CentralizedConfig, ds: Dataset) -> None:
    node = isinstance(ds, NodeDataset)
    if not node and (cfg.inductive or cfg.serves_on != "population"):
        raise ConfigError(
            "centralized: inductive and serves_on are node-level settings; graph-level "
            f"dataset '{ds.name}' takes neither"
        )
    if cfg.serves_on != "population" and not cfg.inductive:
        raise ConfigError(
            f"centralized.serves_on: '{cfg.serves_on}' answers training nodes on the graph "
            "they were trained on, which needs inductive: true (a transductive model trained "
            "on the whole graph)"
        )


def deployment(
    model: nn.Module, ds: Dataset, pooled: NodeClient | GraphClient, serves_on: str
) -> NodeQueryAPI | InductiveQueryAPI | GraphQueryAPI:
    """The released model's query API, answering on the graph ``serves_on`` names."""
    if not isinstance(ds, NodeDataset):
        return GraphQueryAPI(model)
    if serves_on == "population":
        return NodeQueryAPI(model, ds.data)
    assert isinstance(pooled, NodeClient)
    train = pooled.data.global_id[pooled.data.train_mask].numpy(force=True)
    return InductiveQueryAPI(model, ds.data, train, serves_on)


def training_graph(pooled: NodeClient, inductive: bool) -> Data:
    """The graph a node-level model trains on: the pooled graph, or (``inductive``) the
    subgraph its training nodes induce, every node of it labelled for training."""
    if not inductive:
        return pooled.data
    keep = pooled.data.train_mask
    edge_index, _ = subgraph(keep, pooled.data.edge_index, relabel_nodes=True)
    return Data(
        x=pooled.data.x[keep],
        edge_index=edge_index,
        y=pooled.data.y[keep],
        train_mask=torch.ones(int(keep.sum()), dtype=torch.bool),
    )


class Centralized:
    name = "centralized"
    level = "any"
    Config = CentralizedConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        if defenses:
            raise ConfigError(f"centralized: defenses are not supported (got {len(defenses)})")
        cfg = config if isinstance(config, CentralizedConfig) else CentralizedConfig(**config)
        _check_settings(cfg, federation.dataset)
        seed_everything(derive_seed(seed, "centralized"))
        ds = federation.dataset
        spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, ds.level)
        model = spec.build()
        opt = make_optimizer(cfg.optimizer, model, cfg.lr, cfg.weight_decay)
        pooled = pooled_client(federation)
        node = isinstance(pooled, NodeClient)
        score = score_node_clients if node else score_graph_clients
        gen = seeded_generator(derive_seed(seed, "batches"))
        release = Release(cfg.release)
        train_on = training_graph(pooled, cfg.inductive) if node else None
        has_val = bool(pooled.data.val_mask.any()) if node else bool(pooled.val)
        scored = has_val or cfg.release == "best_val"
        # released last at node level, only the last epoch's validation is read (the reported
        # val_accuracy); graph-level scoring draws loader seeds training draws too: kept
        only_last = node and cfg.release == "last"
        history = []
        for epoch in range(cfg.epochs):
            with measuring_losses() as steps:
                if node:
                    train_node_epochs(model, train_on, opt, 1)
                else:
                    train_graph_epochs(model, pooled.train, opt, 1, cfg.batch_size, gen)
            # nothing to score (an adversary's own model keeps its last epoch): skip the pass
            read = scored and (not only_last or epoch == cfg.epochs - 1)
            val = score(model, [pooled], "val")["accuracy"] if read else float("nan")
            history.append({"round": epoch, **mean_loss(steps), "val_accuracy": val})
            release.offer(epoch, val, model)
            report_round(epoch + 1, cfg.epochs, val_accuracy=val)
        release.load_into(model)
        test = score(model, [pooled], "test")
        if not node:  # a mixture's per-member AUCs, as the federated targets report them
            test.update(source_aucs(model, [pooled], ds))
        api = deployment(model, ds, pooled, cfg.serves_on)
        return TrainedTarget(
            name=self.name,
            level=ds.level,
            global_model=model,
            client_models={},
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                {**cfg.model_dump(), "epochs": release.round + 1, "release": "last"},
                1,
                int(pooled.data.train_mask.sum()) if node else len(pooled.train),
            ),
            query=api,
            served=serve(model, [pooled], ds.num_items) if node else None,
            transcript=Transcript("none"),
            ledger=PrivacyLedger(),
            utility={
                **test,
                "val_accuracy": release.val_accuracy,
                "best_round": float(release.round),
            },
            history=history,
        )


TARGETS.register("centralized")(Centralized())
