"""GAP (Sajadmanesh et al., USENIX Security 2023) trained with FedAvg: node- and edge-level DP
for node classification, the way the literature does it.

Three modules, trained in stages so that edges are read only once, through noisy sums:
1. **Encoder**: an MLP on node features with a linear head for pre-training, trained with
   FedAvg (rows are independent, so DP-SGD's per-node clipping is exact).
2. **Aggregation perturbation**: each client normalises its nodes' encodings and computes
   ``hops`` noisy neighbour sums on its own subgraph, once
   (``fgl_workbench.defenses.aggregation_perturbation``).
3. **Classifier**: one MLP base per hop on the cached aggregates, concatenated, then an MLP
   head, trained with FedAvg (DP-SGD per node again); released at the best validation round
   (the last under DP unless ``release: best_val`` asks, and then ε says what it excludes).

Inference runs the encoder and the perturbed aggregation once over the population graph, so a
querier reads one fixed table of logits (a query's ``hops`` do not change the answer, and
repeating a query costs no privacy). Without defenses this is the non-private GAP baseline.

Neighbouring relations: ``aggregation-perturbation`` at edge level alone protects one edge
(the MLPs never read edges); at node level it must come with ``dp-sgd``, and together they
protect one node with its features, label and (degree-bounded) edges."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses.aggregation_perturbation import (
    APConfig,
    bound_out_degree,
    perturbed_hops,
)
from fgl_workbench.defenses.aggregation_perturbation import ledger_events as ap_events
from fgl_workbench.defenses.base import accounted, with_selection_caveat
from fgl_workbench.defenses.calibration import require_noise
from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
    private_optimizer,
    steps_for,
    train_rows_epochs_dp,
)
from fgl_workbench.defenses.dp_sgd import ledger_event as dp_sgd_event
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import ConfigError
from fgl_workbench.models.node import MLP
from fgl_workbench.progress import report_round
from fgl_workbench.query import TableQueryAPI
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.storable import storable
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.fedavg import average_states
from fgl_workbench.targets.training import (
    Release,
    ReleaseRule,
    TrainingRecipe,
    release_rule,
    utility_scores,
)
from fgl_workbench.transcript import SERVER, KeepPayloads, Transcript, client

ENCODER_WEIGHTS, CLASSIFIER_WEIGHTS = "gap_encoder_weights", "gap_classifier_weights"


class GAPConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    encoder_dim: int = Field(16, ge=1, le=1024, description="width of the encodings")
    hidden: int = Field(64, ge=1, le=4096)
    hops: int = Field(2, ge=1, le=5, description="perturbed aggregation steps")
    encoder_rounds: int = Field(50, ge=1, le=10_000)
    rounds: int = Field(100, ge=1, le=10_000, description="classifier rounds")
    local_epochs: int = Field(1, ge=1, le=100)
    lr: float = Field(0.01, gt=0.0, le=10.0)
    weight_decay: float = Field(0.0, ge=0.0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    release: ReleaseRule | None = None  # best_val; last under a DP defense
    keep_payloads: KeepPayloads = "last_round"


@storable
@dataclass(frozen=True)
class GAPSpec:
    """The released architecture (duck-types ``ModelSpec``: pickles into reference workers)."""

    in_dim: int
    num_classes: int
    encoder_dim: int
    hidden: int
    hops: int
    dropout: float
    level: str = "node"

    def build(self) -> GAPModel:
        return GAPModel(self)


class Encoder(nn.Module):
    """MLP to the encoding, plus the linear head it is pre-trained with."""

    def __init__(self, spec: GAPSpec) -> None:
        super().__init__()
        self.mlp = MLP(spec.in_dim, spec.hidden, spec.encoder_dim, 2, spec.dropout)
        self.head = nn.Linear(spec.encoder_dim, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.mlp(x)))


class Classifier(nn.Module):
    """One MLP base per hop, concatenated, then an MLP head. Input row i holds node i's
    aggregates side by side, so rows are independent records."""

    def __init__(self, spec: GAPSpec) -> None:
        super().__init__()
        self.width = spec.encoder_dim
        self.bases = nn.ModuleList(
            nn.Linear(spec.encoder_dim, spec.hidden) for _ in range(spec.hops + 1)
        )
        self.head = MLP(
            (spec.hops + 1) * spec.hidden, spec.hidden, spec.num_classes, 2, spec.dropout
        )

    def forward(self, stacked: torch.Tensor) -> torch.Tensor:
        parts = stacked.split(self.width, dim=1)
        return self.head(
            torch.cat([F.relu(b(p)) for b, p in zip(self.bases, parts, strict=True)], 1)
        )


class GAPModel(nn.Module):
    """Encoder, exact aggregation, classifier: what an adversary builds from the recipe (its own
    models need no noise). The deployed target answers from its noisy table instead."""

    def __init__(self, spec: GAPSpec) -> None:
        super().__init__()
        self.encoder = Encoder(spec)
        self.classifier = Classifier(spec)
        self.hops = spec.hops

    def aggregates(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        ap: APConfig | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """[N, (hops+1)·encoder_dim]: the (perturbed) multi-hop aggregates of the encodings."""
        gen = generator or torch.Generator()
        return torch.cat(perturbed_hops(self.encoder.mlp(x), edge_index, self.hops, ap, gen), 1)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.aggregates(x, edge_index))


class GAP:
    name = "gap"
    level = "node"
    Config = GAPConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        require_noise(self.name, defenses)
        cfg, ap, dp_sgd = self._checked(federation, config, defenses)
        ds = federation.dataset
        assert isinstance(ds, NodeDataset)
        seed_everything(derive_seed(seed, "gap"))
        spec = GAPSpec(
            ds.num_features, ds.num_classes, cfg.encoder_dim, cfg.hidden, cfg.hops, cfg.dropout
        )
        model = spec.build()
        clients = federation.clients
        transcript = Transcript(cfg.keep_payloads)
        ap_noise = seeded_generator(derive_seed(seed, "aggregation-noise"))
        rounds = FederatedRows(cfg, dp_sgd, transcript, seed, [c.data.train_mask for c in clients])
        ys = [c.data.y for c in clients]

        xs = [c.data.x for c in clients]
        steps = rounds.run(model.encoder, xs, ys, None, cfg.encoder_rounds, 0, ENCODER_WEIGHTS)

        def aggregates(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            if ap is not None and ap.level == "node":
                edge_index = bound_out_degree(edge_index, ap.max_degree, ap_noise)
            with torch.no_grad():
                return model.eval().aggregates(x, edge_index, ap, ap_noise)

        cached = [aggregates(c.data.x, c.data.edge_index) for c in clients]
        release = Release(release_rule(cfg.release, accounted(defenses)))
        vals = [c.data.val_mask for c in clients]
        selection = (vals, release)
        steps += rounds.run(
            model.classifier,
            cached,
            ys,
            selection,
            cfg.rounds,
            cfg.encoder_rounds,
            CLASSIFIER_WEIGHTS,
        )
        release.load_into(model.classifier)
        model.eval()
        with torch.no_grad():
            table = model.classifier(aggregates(ds.data.x, ds.data.edge_index))
            test = utility_scores(
                [
                    (y[c.data.test_mask].numpy(force=True), model.classifier(x)[c.data.test_mask])
                    for c, y, x in zip(clients, ys, cached, strict=True)
                ]
            )
        ledger = gap_ledger(cfg, ap, dp_sgd, steps, release.rule)
        return TrainedTarget(
            name=self.name,
            level="node",
            global_model=model,
            client_models={},
            spec=spec,  # type: ignore[arg-type]
            recipe=TrainingRecipe(
                self.name,
                {**cfg.model_dump(), "rounds": release.round + 1, "release": "last"},
                len(clients),
                int(sum(int(c.data.train_mask.sum()) for c in clients)),
                tuple(defenses),
            ),
            query=TableQueryAPI(table),
            transcript=transcript,
            ledger=ledger,
            utility={
                **test,
                "val_accuracy": release.val_accuracy,
                "best_round": float(release.round),
            },
        )

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """The ledger ``fit`` will write, before training (calibration by ε). Every client
        trains in every round of both phases, so its DP-SGD steps are known exactly: the
        planned ledger is the real one."""
        cfg, ap, dp_sgd = self._checked(federation, config, defenses)
        rounds = cfg.encoder_rounds + cfg.rounds
        steps = 0 if dp_sgd is None else rounds * steps_for(dp_sgd, cfg.local_epochs)
        rule = release_rule(cfg.release, accounted(defenses))
        return gap_ledger(cfg, ap, dp_sgd, steps, rule)

    @staticmethod
    def _checked(
        federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> tuple[GAPConfig, APConfig | None, DPSGDConfig | None]:
        cfg = config if isinstance(config, GAPConfig) else GAPConfig(**(config or {}))
        if not isinstance(federation.dataset, NodeDataset):
            raise ConfigError("targets: gap is node-level; the federation is graph-level")
        return (cfg, *checked_defenses(defenses))


def gap_ledger(
    cfg: GAPConfig, ap: APConfig | None, dp_sgd: DPSGDConfig | None, steps: int, rule: str
) -> PrivacyLedger:
    """Aggregation perturbation's events, then DP-SGD's over ``steps`` steps of the busiest
    client (at node level a node's own row is part of the node unit), with the caveat of a
    best-validation release."""
    ledger = PrivacyLedger()
    if ap is not None:
        for event in ap_events(ap, cfg.hops):
            ledger = ledger.record(event)
    if dp_sgd is not None:
        unit = "node" if ap is not None and ap.level == "node" else "record"
        ledger = ledger.record(dp_sgd_event(dp_sgd, steps, unit))
    return with_selection_caveat(ledger, rule)


def checked_defenses(defenses: Sequence[Any]) -> tuple[APConfig | None, DPSGDConfig | None]:
    by_name = {d.name: d.config for d in defenses}
    unknown = sorted(set(by_name) - {"aggregation-perturbation", "dp-sgd"})
    if unknown:
        raise ConfigError(
            f"defenses: gap cannot apply {', '.join(unknown)}; it supports "
            "aggregation-perturbation and dp-sgd"
        )
    ap, dp_sgd = by_name.get("aggregation-perturbation"), by_name.get("dp-sgd")
    if dp_sgd is not None and (ap is None or ap.level != "node"):
        raise ConfigError(
            "defenses: dp-sgd on gap protects nodes only together with aggregation-perturbation "
            "at level 'node' (exact or edge-level sums would leak the node through its neighbours)"
        )
    if ap is not None and ap.level == "node" and dp_sgd is None:
        raise ConfigError(
            "defenses: aggregation-perturbation at level 'node' needs dp-sgd too: a node's own "
            "features and label reach the encoder and classifier, which only DP-SGD protects"
        )
    return ap, dp_sgd


class FederatedRows:
    """FedAvg over a module whose inputs are independent rows (GAP's encoder and classifier):
    every client every round, full-batch Adam epochs or DP-SGD steps, node-count weights."""

    def __init__(
        self,
        cfg: GAPConfig,
        dp_sgd: DPSGDConfig | None,
        transcript: Transcript,
        seed: int,
        train_masks: list[torch.Tensor],
    ) -> None:
        self.cfg, self.dp_sgd, self.transcript, self.train = cfg, dp_sgd, transcript, train_masks
        self.batches = seeded_generator(derive_seed(seed, "batches"))
        self.noise = seeded_generator(derive_seed(seed, "dp-sgd-noise"))
        self.weights = np.array([float(m.sum()) for m in train_masks])

    def run(
        self,
        module: nn.Module,
        xs: list[torch.Tensor],
        ys: list[torch.Tensor],
        selection: tuple[list[torch.Tensor], Release] | None,
        count: int,
        offset: int,
        kind: str,
    ) -> int:
        """Train ``module`` for ``count`` rounds in place (transcript rounds from ``offset``);
        returns the DP-SGD steps of the busiest client."""
        k = len(xs)
        local = [copy.deepcopy(module) for _ in range(k)]
        opts = [self._optimizer(m, int(t.sum())) for m, t in zip(local, self.train, strict=True)]
        steps = np.zeros(k, dtype=int)
        for r in range(count):
            state = module.state_dict()
            self.transcript.broadcast(
                offset + r, SERVER, [client(i) for i in range(k)], kind, state
            )
            uploads = []
            for i in range(k):
                local[i].load_state_dict(state)
                x, y = xs[i][self.train[i]], ys[i][self.train[i]]
                steps[i] += self._train(local[i], opts[i], x, y)
                msg = self.transcript.send(
                    offset + r, client(i), SERVER, kind, local[i].state_dict()
                )
                uploads.append(local[i].state_dict() if msg.payload is None else msg.payload)
            module.load_state_dict(average_states(uploads, self.weights))
            if selection is not None:
                vals, release = selection
                module.eval()
                with torch.no_grad():
                    pairs = [
                        (y[v].numpy(force=True), module(x)[v])
                        for x, y, v in zip(xs, ys, vals, strict=True)
                    ]
                val = utility_scores(pairs, full=False)["accuracy"]
                release.offer(r, val, module)
                report_round(r + 1, count, val_accuracy=val)
            else:  # the encoder phase scores nothing; it still says where it is
                report_round(r + 1, count)
        return int(steps.max())

    def _optimizer(self, module: nn.Module, num_records: int) -> torch.optim.Optimizer:
        opt = torch.optim.Adam(
            module.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay
        )
        if self.dp_sgd is None:
            return opt
        return private_optimizer(opt, self.dp_sgd, num_records, self.noise)

    def _train(self, module: nn.Module, opt, x: torch.Tensor, y: torch.Tensor) -> int:
        if self.dp_sgd is not None:
            return train_rows_epochs_dp(
                module, x, y, opt, self.cfg.local_epochs, self.dp_sgd, self.batches
            )
        module.train()
        for _ in range(self.cfg.local_epochs):
            opt.zero_grad()
            F.cross_entropy(module(x), y).backward()
            opt.step()
        return 0


TARGETS.register("gap")(GAP())
