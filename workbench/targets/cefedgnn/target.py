"""CE-FedGNN (Guo et al. 2026, Alg. 1): federated GNN training that keeps the edges between
clients. Each round, every client starts from the averaged model W and gradient estimator G,
takes K local steps on minibatches of its training nodes through its moving-average embedding
estimators (Eq. 5; ``propagation``), with G ← (1 − β)G + β∇ and W ← W − ηG (Eq. 9), then
uploads W and G (averaged uniformly, 1/N, as the paper's objective weighs clients) and
releases the hidden states of its *boundary* nodes whose estimators moved this round; the
server routes each release to the clients that hold that node as a halo node, and counts
releases per node (R′ of the accountant).

Baselines of the same family (the paper's Tables 1, 2 and 5): ``gamma: 1`` is FedGNN-ST (stale
shared embeddings, no moving average); ``beta: 1`` drops the gradient moving average;
``cross_edges: false`` drops the edges between clients (FedAvg on sampled GNNs);
``federated: false`` is stand-alone clients (SC: no averaging, no exchange).

A client scores (validation, test) its own nodes with full neighbourhoods through the latest
releases of its halo nodes: that is what its deployment computes. The released model is the
averaged GNN (the validation-best round's), served on the population graph."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from accountants import Gaussian, MetricGaussian, PrivacyLedger, rho_knn_percentile
from defenses.metric_dp import normalise
from workbench.data.datasets import NodeDataset
from workbench.data.federation import Federation
from workbench.errors import ConfigError
from workbench.models import ModelConfig, ModelSpec
from workbench.query import NodeQueryAPI
from workbench.seeding import derive_seed, seed_everything
from workbench.targets.base import TARGETS, TrainedTarget, check_node_target
from workbench.targets.cefedgnn.halo import HaloClient, halo_client
from workbench.targets.cefedgnn.propagation import Estimators, estimated_logits
from workbench.targets.training import Release, ReleaseRule, TrainingRecipe, utility_scores
from workbench.transcript import (
    EMBEDDINGS,
    GRADIENTS,
    MODEL_WEIGHTS,
    SERVER,
    KeepPayloads,
    Transcript,
    client,
)


class CEFedGNNConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: ModelConfig = ModelConfig(arch="sage", hidden=64)
    rounds: int = Field(62, ge=1, le=100_000, description="R (paper: T / K = 2000 / 32)")
    local_steps: int = Field(32, ge=1, le=10_000, description="K")
    batch_size: int = Field(64, ge=1, description="seed nodes per local step")
    fanout: int | None = Field(10, ge=1, description="neighbours kept per hop; None: all")
    gamma: float = Field(0.5, gt=0.0, le=1.0, description="embedding moving average; 1: none")
    beta: float = Field(0.9, gt=0.0, le=1.0, description="gradient moving average; 1: SGD")
    lr: float = Field(0.5, gt=0.0, le=10.0, description="η (not given in the paper)")
    cross_edges: bool = Field(True, description="false: edges between clients dropped")
    federated: bool = Field(True, description="false: stand-alone clients (SC)")
    model_noise: float = Field(0.0, ge=0.0, description="σ1 on the averaged model (paper: 1e-3)")
    estimator_noise: float = Field(
        0.0, ge=0.0, description="σ2 on the averaged gradient estimator (paper: 1e-3)"
    )
    clip: float = Field(
        15.0,
        gt=0.0,
        description="L2 norm each client's model and estimator are clipped to before a noisy "
        "average (paper: 15), which bounds one client's influence on it by 2·clip/N",
    )
    release: ReleaseRule = Field("best_val", description="best_val or last round's model")
    keep_payloads: KeepPayloads = "last_round"


def own_graph_only(c: HaloClient) -> HaloClient:
    """The client without its cross-client edges and halo nodes."""
    return HaloClient(c.client_id, c.data.subgraph(torch.arange(c.num_own)), c.num_own)


class CEFedGNN:
    name = "ce-fedgnn"
    level = "node"
    Config = CEFedGNNConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        check_node_target(
            self.name,
            federation,
            defenses,
            ("metric-dp",),
            "its privacy is noise on what it exchanges: metric-DP on the boundary embeddings, "
            "model_noise and estimator_noise on the averages",
        )
        mdp = {d.name: d.config for d in defenses}.get("metric-dp")
        cfg = config if isinstance(config, CEFedGNNConfig) else CEFedGNNConfig(**(config or {}))
        if (cfg.model.arch or "gcn") not in ("gcn", "sage") or (cfg.model.layers or 2) != 2:
            raise ConfigError(
                "targets.params.model: ce-fedgnn trains a 2-layer 'gcn' or 'sage' "
                f"(got arch {cfg.model.arch!r}, layers {cfg.model.layers!r})"
            )
        ds = federation.dataset
        assert isinstance(ds, NodeDataset)
        seed_everything(derive_seed(seed, "ce-fedgnn"))
        gen = torch.Generator().manual_seed(derive_seed(seed, "ce-fedgnn/batches"))
        noise = torch.Generator().manual_seed(derive_seed(seed, "ce-fedgnn/noise"))
        spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, "node")
        global_model = spec.build()
        estimator = [torch.zeros_like(p) for p in global_model.parameters()]
        held = federation.partition.owner(ds.num_items) >= 0
        clients = [halo_client(ds, p, held) for p in federation.partition.clients]
        if not cfg.cross_edges:
            clients = [own_graph_only(c) for c in clients]
        hidden = cfg.model.hidden
        # the server's buffer of released hidden states and degrees, over global ids
        buffer = torch.zeros(ds.num_items, hidden)
        buffer_degree = torch.zeros(ds.num_items, dtype=torch.long)
        releases = np.zeros(ds.num_items, dtype=np.int64)
        estimators = [Estimators.zeros(c.num_own, hidden, ds.num_classes) for c in clients]
        local = [copy.deepcopy(global_model) for _ in clients]
        local_g = [[g.clone() for g in estimator] for _ in clients]
        # every release is kept: attacks on the exchanged embeddings read them all (small)
        transcript = Transcript(cfg.keep_payloads, always_keep={EMBEDDINGS})
        everyone = [client(k) for k in range(len(clients))]
        # stand-alone clients have no one model to select rounds by: they keep their last
        release = Release(cfg.release if cfg.federated else "last")
        models = [global_model] * len(clients) if cfg.federated else local  # who scores
        history = []
        for r in range(cfg.rounds):
            if cfg.federated:
                transcript.broadcast(r, SERVER, everyone, MODEL_WEIGHTS, global_model.state_dict())
                transcript.broadcast(r, SERVER, everyone, GRADIENTS, estimator)
                for k in range(len(clients)):
                    local[k].load_state_dict(global_model.state_dict())
                    local_g[k] = [g.clone() for g in estimator]
            shared = []
            for k, c in enumerate(clients):
                self._local_round(
                    local[k], local_g[k], c, estimators[k], buffer, buffer_degree, cfg, gen
                )
                if cfg.federated:
                    transcript.send(r, client(k), SERVER, MODEL_WEIGHTS, local[k].state_dict())
                    transcript.send(r, client(k), SERVER, GRADIENTS, local_g[k])
                if cfg.cross_edges and cfg.federated:
                    shared.append(self._release(k, c, estimators[k], transcript, r, mdp, noise))
            for ids, h, deg in shared:  # the server's buffer, routed to the halo holders
                buffer[ids], buffer_degree[ids] = h, deg
                releases[ids.numpy()] += 1
            if shared:
                self._route(clients, shared, transcript, r)
            if cfg.federated:
                self._average(global_model, estimator, local, local_g, cfg, noise)
            val = self._score(models, clients, buffer, buffer_degree, "val")["accuracy"]
            history.append({"round": float(r), "val_accuracy": val})
            release.offer(r, val, global_model if cfg.federated else local[0])
        release.load_into(global_model)
        test = self._score(models, clients, buffer, buffer_degree, "test")
        boundary = np.concatenate([c.data.global_id[c.boundary].numpy() for c in clients])
        ledger = self._ledger(cfg, mdp, len(clients), int(releases.max(initial=0)))
        utility = {
            **test,
            "val_accuracy": release.val_accuracy,
            "best_round": float(release.round),
            "max_releases": float(releases.max(initial=0)),
            "mean_releases_boundary": float(releases[boundary].mean()) if boundary.size else 0.0,
        }
        if mdp is not None:  # ρ among the final normalised embeddings, where ε(ρ) is read
            utility["metric_rho"] = embedding_rho(global_model, ds, mdp)
        return TrainedTarget(
            name=self.name,
            level="node",
            global_model=global_model,
            client_models={} if cfg.federated else dict(enumerate(local)),
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                {**cfg.model_dump(), "rounds": release.round + 1, "release": "last"},
                len(clients),
                int(sum(int(c.data.train_mask.sum()) for c in clients)),
            ),
            query=NodeQueryAPI(global_model, ds.data),
            transcript=transcript,
            ledger=ledger,
            utility=utility,
            history=history,
        )

    @staticmethod
    def _local_round(model, g, c, est, buffer, buffer_degree, cfg, gen) -> None:
        """K steps of Eq. 9 on minibatches of the client's training nodes."""
        train = torch.nonzero(c.data.train_mask).squeeze(1)
        if train.numel() == 0:
            return
        degree = local_degree(c, buffer_degree)
        halo = buffer[c.halo]
        params = list(model.parameters())
        model.train()
        for _ in range(cfg.local_steps):
            pick = torch.randperm(train.numel(), generator=gen)[: cfg.batch_size]
            seeds = train[pick]
            logits = estimated_logits(
                model, c, est, halo, degree, seeds, cfg.gamma, cfg.fanout, gen
            )
            loss = F.cross_entropy(logits, c.data.y[seeds])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, gk, grad in zip(params, g, grads, strict=True):
                    gk.mul_(1 - cfg.beta).add_(grad, alpha=cfg.beta)
                    p.sub_(cfg.lr * gk)

    @staticmethod
    def _release(k, c, est, transcript, r, mdp, noise):
        """The boundary nodes whose hidden estimator moved this round: their hidden states
        (with metric-DP, L2-normalised and perturbed by N(0, σ0² I), one draw per release)
        and degrees go to the server; the others are not sent."""
        moved = c.boundary[est.touched[c.boundary]]
        ids = c.data.global_id[moved]
        h = torch.relu(est.hidden[moved])
        if mdp is not None:
            h = normalise(h) + mdp.sigma0 * torch.randn(h.shape, generator=noise)
        deg = c.degree[moved]
        est.touched[:] = False
        transcript.send(r, client(k), SERVER, EMBEDDINGS, {"global_id": ids, "h": h, "degree": deg})
        return ids, h, deg

    @staticmethod
    def _route(clients, shared, transcript, r) -> None:
        ids = torch.cat([s[0] for s in shared])
        h = torch.cat([s[1] for s in shared])
        for k, c in enumerate(clients):
            wanted = torch.isin(ids, c.halo)
            if wanted.any():
                payload = {"global_id": ids[wanted], "h": h[wanted]}
                transcript.send(r, SERVER, client(k), EMBEDDINGS, payload)

    @staticmethod
    def _average(global_model, estimator, local, local_g, cfg, noise) -> None:
        """Uniform means of the clients' models and gradient estimators (1/N); with noise,
        of their clipped copies, plus one N(0, σ² I) draw every client receives."""
        models = [torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in local]
        grads = [torch.cat([g.reshape(-1) for g in gs]) for gs in local_g]
        w = noisy_mean(models, cfg.model_noise, cfg.clip, noise)
        g = noisy_mean(grads, cfg.estimator_noise, cfg.clip, noise)
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(w, global_model.parameters())
            torch.nn.utils.vector_to_parameters(g, estimator)

    @staticmethod
    def _ledger(cfg, mdp, num_clients: int, max_releases: int) -> PrivacyLedger:
        """Metric-DP of the embedding releases, R′ the most any node was released; the
        Gaussian noise on the averages at the client level (sensitivity 2·clip/N per round)."""
        ledger = PrivacyLedger()
        if mdp is not None and max_releases:
            ledger = ledger.record(MetricGaussian(mdp.sigma0, max_releases))
        for sigma in (cfg.model_noise, cfg.estimator_noise):
            if sigma > 0 and cfg.federated:
                sensitivity = 2 * cfg.clip / num_clients
                ledger = ledger.record(Gaussian(sigma, sensitivity, cfg.rounds))
        return ledger

    @staticmethod
    def _score(models, clients, buffer, buffer_degree, split) -> dict[str, float]:
        """Each client's own nodes with full neighbourhoods and its halo's latest releases."""
        per_client = []
        with torch.no_grad():
            for model, c in zip(models, clients, strict=True):
                mask = getattr(c.data, f"{split}_mask")[: c.num_own]
                if not mask.any():
                    continue
                model.eval()
                classes = model.convs[-1].out_channels
                scratch = Estimators.zeros(c.num_own, buffer.shape[1], classes)
                nodes = torch.arange(c.num_own)
                logits = estimated_logits(
                    model,
                    c,
                    scratch,
                    buffer[c.halo],
                    local_degree(c, buffer_degree),
                    nodes,
                    1.0,
                    None,
                )
                per_client.append((c.data.y[nodes][mask].numpy(), logits[mask]))
        return utility_scores(per_client)


def noisy_mean(
    vectors: list[torch.Tensor], sigma: float, clip: float, generator: torch.Generator
) -> torch.Tensor:
    """The mean of ``vectors``; with ``sigma`` > 0, of their copies clipped to L2 norm
    ``clip``, plus N(0, σ² I)."""
    if sigma == 0:
        return torch.stack(vectors).mean(0)
    clipped = [v * min(1.0, clip / max(float(v.norm()), 1e-12)) for v in vectors]
    mean = torch.stack(clipped).mean(0)
    return mean + sigma * torch.randn(mean.shape, generator=generator)


@torch.no_grad()
def embedding_rho(model: nn.Module, dataset: NodeDataset, cfg) -> float:
    """ρ: the ``percentile`` of k-th-nearest-neighbour distances among every node's final
    normalised hidden embedding (the released model on the whole graph)."""
    model.eval()
    clean = normalise(model.embed(dataset.data.x, dataset.data.edge_index)).numpy()
    k = min(cfg.k, clean.shape[0] - 1)
    return rho_knn_percentile(clean, k=k, q=cfg.percentile, normalize=False)


def local_degree(c: HaloClient, buffer_degree: torch.Tensor) -> torch.Tensor:
    """Own nodes' degrees as the client sees them (all their edges); halo nodes' as released."""
    deg = c.degree.clone()
    deg[c.num_own :] = buffer_degree[c.halo]
    return deg


TARGETS.register("ce-fedgnn")(CEFedGNN())
