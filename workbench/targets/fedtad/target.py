"""The FedTAD target: node-level FedAvg whose server, after every aggregation, distils the
clients' uploaded models into the global one on pseudo-graphs from a class-conditional
generator, each teacher weighted per class by the reliability its client uploaded once before
the first round (Algorithm 1). Defaults are the official code's where the paper gives none
(docs/methods/fedtad.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch import nn

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.federation import Federation
from fgl_workbench.device import seeded_generator
from fgl_workbench.models import ModelSpec
from fgl_workbench.seeding import derive_seed
from fgl_workbench.targets.base import TARGETS, TrainedTarget, check_node_target
from fgl_workbench.targets.fedavg import FedAvgConfig, NodeFedAvg
from fgl_workbench.targets.fedtad.distillation import (
    ConditionalGenerator,
    Divergence,
    divergence_loss,
    diversity_loss,
    knn_graph,
    pseudo_labels,
    semantic_loss,
)
from fgl_workbench.targets.fedtad.reliability import (
    Variant,
    class_reliability,
    reliability_weights,
)
from fgl_workbench.transcript import RELIABILITY, SERVER, KeepPayloads, Transcript, client


class FedTADConfig(FedAvgConfig):
    lambda_sem: float = Field(1.0, ge=0.0, description="λ1, semantic loss weight")
    lambda_div: float = Field(1.0, ge=0.0, description="λ2, diversity loss weight")
    outer_steps: int = Field(5, ge=0, le=1000, description="I: generator/student alternations")
    generator_steps: int = Field(1, ge=1, le=1000, description="I_g per alternation")
    student_steps: int = Field(5, ge=1, le=1000, description="I_d per alternation")
    pseudo_nodes: int = Field(100, ge=2, le=100_000, description="B")
    knn: int = Field(5, ge=1, le=100, description="K of the pseudo-graph")
    noise_dim: int = Field(32, ge=1, le=4096)
    generator_lr: float = Field(1e-3, gt=0.0)
    student_lr: float = Field(1e-3, gt=0.0)
    distill_weight_decay: float = Field(5e-4, ge=0.0)
    walk_length: int = Field(5, ge=1, le=64, description="p of the topology embedding")
    reliability: Variant = "paper"
    pseudo_labels: Literal["uniform", "balanced"] = "uniform"
    similarity: Literal["dot", "cosine"] = "dot"
    divergence: Divergence = "kl"
    # the reliabilities are uploaded once, in the first round: keep that round's payloads
    keep_payloads: KeepPayloads = "first_and_last"


@dataclass
class Distiller:
    """The server's state across rounds: the clients' reliabilities, the generator and the
    persistent optimizers of generator and student."""

    cfg: FedTADConfig
    spec: ModelSpec
    phi: np.ndarray  # [clients, C]
    generator: ConditionalGenerator
    generator_opt: torch.optim.Optimizer
    student_opt: torch.optim.Optimizer
    rng: torch.Generator

    def teachers(self, uploads: list[dict[str, torch.Tensor]]) -> list[nn.Module]:
        out = []
        for state in uploads:
            model = self.spec.build()
            model.load_state_dict(state)
            out.append(model.eval().requires_grad_(False))
        return out

    def distil(self, student: nn.Module, teachers: list[nn.Module], chosen: np.ndarray) -> None:
        cfg = self.cfg
        weights = reliability_weights(self.phi[chosen])
        y = pseudo_labels(cfg.pseudo_nodes, self.phi.shape[1], cfg.pseudo_labels, self.rng)
        for _ in range(cfg.outer_steps):
            z = torch.randn(cfg.pseudo_nodes, cfg.noise_dim, generator=self.rng)
            student.eval()  # the student is not stepped while the generator learns
            for _ in range(cfg.generator_steps):
                self.generator_opt.zero_grad()
                x = self.generator(z, y)
                edges = knn_graph(x, cfg.knn, cfg.similarity)
                t_logits = [t(x, edges) for t in teachers]
                loss = (
                    -divergence_loss(student(x, edges), t_logits, y, weights, cfg.divergence)
                    + cfg.lambda_sem * semantic_loss(t_logits, y, weights)
                    + cfg.lambda_div * diversity_loss(x)
                )
                loss.backward()
                self.generator_opt.step()
            with torch.no_grad():
                x = self.generator(z, y)
                edges = knn_graph(x, cfg.knn, cfg.similarity)
                t_logits = [t(x, edges) for t in teachers]
            student.train()
            for _ in range(cfg.student_steps):
                self.student_opt.zero_grad()
                divergence_loss(student(x, edges), t_logits, y, weights, cfg.divergence).backward()
                self.student_opt.step()
        student.zero_grad(set_to_none=True)


SUPPORTED_DEFENSES = ("gaussian-upload",)


class FedTAD(NodeFedAvg):
    name = "fedtad"
    Config = FedTADConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        self._check(federation, defenses)
        return super().fit(federation, self.config(config), defenses, seed)

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        self._check(federation, defenses)
        return super().planned_ledger(federation, config, defenses)

    def _check(self, federation: Federation, defenses: Sequence[Any]) -> None:
        check_node_target(
            self.name,
            federation,
            defenses,
            SUPPORTED_DEFENSES,
            "its server distils from every client's own model",
        )

    uploads_before_rounds = 1  # the reliability vector

    def start(
        self,
        federation: Federation,
        clients: Sequence[Any],
        global_model: nn.Module,
        transcript: Transcript,
        cfg: Any,
        seed: int,
        protect: Callable[[torch.Tensor], torch.Tensor],
    ) -> Distiller:
        """Each client computes its class-wise reliability once and uploads it, through
        ``protect`` (under gaussian-upload, clipped and noised like its updates and counted
        in the ledger as one more upload: the vector is computed from its labels, features
        and edges)."""
        ds = federation.dataset
        phi = []
        for c in clients:
            d = c.data
            vector = class_reliability(
                d.x,
                d.edge_index,
                d.y.numpy(force=True),
                d.train_mask.numpy(force=True),
                ds.num_classes,
                cfg.walk_length,
                cfg.reliability,
            )
            sent = protect(torch.as_tensor(vector))
            transcript.send(0, client(c.client_id), SERVER, RELIABILITY, sent)
            phi.append(sent.numpy(force=True))
        rng = seeded_generator(derive_seed(seed, "fedtad"))
        torch.manual_seed(derive_seed(seed, "fedtad-generator"))
        generator = ConditionalGenerator(ds.num_classes, ds.num_features, cfg.noise_dim)
        spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, ds.level)
        wd = cfg.distill_weight_decay
        return Distiller(
            cfg,
            spec,
            np.stack(phi),
            generator,
            torch.optim.Adam(generator.parameters(), lr=cfg.generator_lr, weight_decay=wd),
            torch.optim.Adam(global_model.parameters(), lr=cfg.student_lr, weight_decay=wd),
            rng,
        )

    def after_aggregation(
        self, context: Distiller, r: int, global_model: nn.Module, uploads: list, chosen
    ) -> None:
        if context.cfg.outer_steps:
            context.distil(global_model, context.teachers(uploads), chosen)


TARGETS.register("fedtad")(FedTAD())
