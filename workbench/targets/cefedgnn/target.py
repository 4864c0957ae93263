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
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.accountants import (
    Gaussian,
    MetricGaussian,
    NoGuarantee,
    PrivacyLedger,
    Scope,
)
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation, refuse_inductive
from fgl_workbench.defenses.base import with_selection_caveat
from fgl_workbench.defenses.metric_dp import METRIC_SCOPE, MetricReleases, normalise, perturb
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.progress import report_round
from fgl_workbench.query import AnswerTable, NodeQueryAPI
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.storable import storable
from fgl_workbench.targets.base import TARGETS, TrainedTarget, check_node_target
from fgl_workbench.targets.cefedgnn.halo import HaloClient, halo_client
from fgl_workbench.targets.cefedgnn.propagation import Estimators, estimated_logits
from fgl_workbench.targets.cefedgnn.tasks import (
    EdgeHead,
    EdgeModel,
    Halo,
    class_weights,
    client_edges,
    edge_batch_loss,
    edge_predictions,
    edge_scores,
)
from fgl_workbench.targets.training import (
    Release,
    ReleaseRule,
    TrainingRecipe,
    release_rule,
    utility_scores,
)
from fgl_workbench.transcript import (
    EMBEDDINGS,
    GRADIENTS,
    MODEL_WEIGHTS,
    SERVER,
    KeepPayloads,
    Transcript,
    client,
)

VECTORS = ("h", "h_out")  # what a release carries per node: hidden state, h^(L) (edge task)


class CEFedGNNConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
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
    release: ReleaseRule | None = Field(
        None, description="best_val or last round's model; default best_val, last under DP"
    )
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
        refuse_inductive(
            federation,
            "ce-fedgnn",
            "its clients build their graphs, halos included, from the population graph",
        )
        ds = federation.dataset
        assert isinstance(ds, NodeDataset)
        seed_everything(derive_seed(seed, "ce-fedgnn"))
        gen = seeded_generator(derive_seed(seed, "ce-fedgnn/batches"))
        noise = seeded_generator(derive_seed(seed, "ce-fedgnn/noise"))
        task, hidden = ds.edge_task, cfg.model.hidden
        # edge task: the GNN's output is the node embedding h^(L), read by the edge head
        out = hidden if task is not None else ds.num_classes
        spec = ModelSpec(cfg.model, ds.num_features, out, "node")
        global_model = spec.build()
        held = federation.partition.owner(ds.num_items) >= 0
        clients = [halo_client(ds, p, held) for p in federation.partition.clients]
        if not cfg.cross_edges:
            clients = [own_graph_only(c) for c in clients]
        edges = None
        if task is not None:
            head = EdgeHead(hidden, task.attr.shape[1], task.num_classes)
            global_model = EdgeModel(global_model, head)
            edges = [client_edges(task, c, ds.num_items) for c in clients]
            weights = class_weights(edges, task.num_classes)
        estimator = [torch.zeros_like(p) for p in global_model.parameters()]
        # the server's buffer of released hidden states, final embeddings (edge task) and
        # degrees, over global ids
        buffer = Halo(
            torch.zeros(ds.num_items, hidden),
            torch.zeros(ds.num_items, out),
            torch.zeros(ds.num_items, dtype=torch.long),
        )
        releases = np.zeros(ds.num_items, dtype=np.int64)
        estimators = [Estimators.zeros(c.num_own, hidden, out) for c in clients]
        local = [copy.deepcopy(global_model) for _ in clients]
        local_g = [[g.clone() for g in estimator] for _ in clients]
        # every release is kept: attacks on the exchanged embeddings read them all (small)
        transcript = Transcript(cfg.keep_payloads, always_keep={EMBEDDINGS})
        everyone = [client(k) for k in range(len(clients))]
        # stand-alone clients have no one model to select rounds by: they keep their last
        private = mdp is not None or cfg.model_noise > 0 or cfg.estimator_noise > 0
        release = Release(release_rule(cfg.release, private) if cfg.federated else "last")
        models = [global_model] * len(clients) if cfg.federated else local  # who scores
        history = []
        release_log: list = []  # (ids, clean, noisy) of every metric-DP release, in order
        select = "accuracy" if edges is None else "f1_illicit"  # what rounds are chosen by
        for r in range(cfg.rounds):
            if cfg.federated:
                transcript.broadcast(r, SERVER, everyone, MODEL_WEIGHTS, global_model.state_dict())
                transcript.broadcast(r, SERVER, everyone, GRADIENTS, estimator)
                for k in range(len(clients)):
                    local[k].load_state_dict(global_model.state_dict())
                    local_g[k] = [g.clone() for g in estimator]
            shared = []
            for k, c in enumerate(clients):
                if edges is None:
                    loss = node_loss(c, estimators[k], buffer, cfg, gen)
                else:
                    loss = edge_loss(c, edges[k], estimators[k], buffer, weights, cfg, gen)
                self._local_round(local[k], local_g[k], loss, cfg)
                if cfg.federated:
                    transcript.send(r, client(k), SERVER, MODEL_WEIGHTS, local[k].state_dict())
                    transcript.send(r, client(k), SERVER, GRADIENTS, local_g[k])
                if cfg.cross_edges and cfg.federated:
                    payload = release_payload(
                        c, estimators[k], edges is not None, mdp, noise, release_log
                    )
                    transcript.send(r, client(k), SERVER, EMBEDDINGS, payload)
                    shared.append(payload)
            for payload in shared:  # the server's buffer, routed to the halo holders
                ids = payload["global_id"]
                buffer.hidden[ids], buffer.degree[ids] = payload["h"], payload["degree"]
                if "h_out" in payload:
                    buffer.output[ids] = payload["h_out"]
                releases[ids.numpy(force=True)] += (
                    2 if "h_out" in payload else 1
                )  # vectors released
            if shared:
                self._route(clients, shared, transcript, r)
            if cfg.federated:
                self._average(global_model, estimator, local, local_g, cfg, noise)
            read = release.rule == "best_val" or r == cfg.rounds - 1  # else nothing reads it
            val = self._score(models, clients, edges, buffer, "val")[select] if read else math.nan
            history.append({"round": float(r), f"val_{select}": val})
            release.offer(r, val, global_model if cfg.federated else local[0])
            report_round(r + 1, cfg.rounds, **{f"val_{select}": val})
        release.load_into(global_model)
        test = self._score(models, clients, edges, buffer, "test")
        boundary = np.concatenate([c.data.global_id[c.boundary].numpy(force=True) for c in clients])
        ledger = self._ledger(cfg, mdp, len(clients), int(releases.max(initial=0)))
        ledger = with_selection_caveat(ledger, release.rule)
        utility = {
            **test,
            f"val_{select}": release.val_accuracy,
            "best_round": float(release.round),
            "max_releases": float(releases.max(initial=0)),
            "mean_releases_boundary": float(releases[boundary].mean()) if boundary.size else 0.0,
        }
        # the released GNN; an edge task's head is released beside it
        released = gnn_of(global_model)
        metric_releases = MetricReleases.of(release_log) if release_log else None
        rho = metric_releases.rho(mdp.k, mdp.percentile) if metric_releases else float("nan")
        if np.isfinite(rho):  # ρ among what was released, where ε(ρ) is read
            utility["metric_rho"] = rho
        return TrainedTarget(
            name=self.name,
            level="node",
            global_model=released,
            heads={"edge": global_model.head} if isinstance(global_model, EdgeModel) else {},
            client_models={} if cfg.federated else {k: gnn_of(m) for k, m in enumerate(local)},
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                {**cfg.model_dump(), "rounds": release.round + 1, "release": "last"},
                len(clients),
                int(sum(int(c.data.train_mask.sum()) for c in clients)),
            ),
            query=NodeQueryAPI(released, ds.data)
            if edges is None
            else EncoderAPI(released, ds.data),
            transcript=transcript,
            ledger=ledger,
            utility=utility,
            history=history,
            metric_releases=metric_releases,
        )

    @staticmethod
    def _local_round(model, g, loss: Callable[[nn.Module], torch.Tensor] | None, cfg) -> None:
        """K steps of Eq. 9, each on a fresh minibatch (``loss``; None: nothing to train)."""
        if loss is None:
            return
        params = list(model.parameters())
        model.train()
        for _ in range(cfg.local_steps):
            grads = torch.autograd.grad(loss(model), params)
            with torch.no_grad():
                for p, gk, grad in zip(params, g, grads, strict=True):
                    gk.mul_(1 - cfg.beta).add_(grad, alpha=cfg.beta)
                    p.sub_(cfg.lr * gk)

    @staticmethod
    def _route(clients, shared, transcript, r) -> None:
        ids = torch.cat([s["global_id"] for s in shared])
        vectors = {key: torch.cat([s[key] for s in shared]) for key in VECTORS if key in shared[0]}
        for k, c in enumerate(clients):
            wanted = torch.isin(ids, c.halo)
            if wanted.any():
                payload = {"global_id": ids[wanted], **{a: v[wanted] for a, v in vectors.items()}}
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
        Gaussian noise on the averages at the client level. Replacing one client's data moves
        its clipped model by up to 2·clip, so the mean by 2·clip/N, but with cross-client edges
        its released embeddings enter every other client's training too, so every clipped
        model can move: sensitivity 2·clip. The server averages the clean uploads and adds the
        noise itself: no guarantee against it. What the exchange sends (``exchange_events``)
        reaches the server and the halo holders."""
        ledger = PrivacyLedger()
        if mdp is not None and max_releases:
            ledger = ledger.record(MetricGaussian(mdp.sigma0, max_releases, scope=EXCHANGED))
        if cfg.federated and (cfg.model_noise > 0 or cfg.estimator_noise > 0):
            sensitivity = 2 * cfg.clip / (1 if cfg.cross_edges else num_clients)
            scope = Scope("client", "replace one client's data", ("clients", "querier"))
            for sigma in (cfg.model_noise, cfg.estimator_noise):
                if sigma > 0:
                    ledger = ledger.record(Gaussian(sigma, sensitivity, cfg.rounds, scope=scope))
            why = "the server averages the clean uploads and adds the noise itself"
            server = Scope("client", "replace one client's data", ("server",))
            ledger = ledger.record(NoGuarantee(why, server))
        if ledger.is_empty or not (cfg.cross_edges and cfg.federated):
            return ledger
        return PrivacyLedger(ledger.events + exchange_events(mdp is not None))

    @staticmethod
    def _score(models, clients, edges, buffer: Halo, split) -> dict[str, float]:
        """Each client's own nodes (or edges) with full neighbourhoods and its halo's latest
        releases."""
        per_client = []
        with torch.no_grad():
            for k, (model, c) in enumerate(zip(models, clients, strict=True)):
                model.eval()
                halo = local_halo(c, buffer)
                if edges is not None:
                    found = edge_predictions(model, c, edges[k], halo, split)
                else:
                    found = node_predictions(model, c, halo, split)
                if found is not None:
                    per_client.append(found)
        return utility_scores(per_client) if edges is None else edge_scores(per_client)


# the metric-DP releases go to the server, which routes each to the clients holding that
# node as a halo node: they are whom the noise on them speaks to
EXCHANGED = Scope(
    "node", METRIC_SCOPE.neighbouring, ("server", "clients"), "the exchanged hidden states"
)
RECEIVERS = ("server", "clients")


def exchange_events(metric_dp: bool) -> tuple[NoGuarantee, ...]:
    """What the boundary exchange sends in the clear, to the server and (routed) to the
    halo holders: every boundary node's exact degree, and without metric-DP its hidden state.
    A hidden state mixes a node's features with its neighbours' (nodes, edges, records), a
    degree counts its edges, so no unit of a client's data is protected: ε = ∞ against them,
    standard DP (metric noise is no (ε, δ) guarantee) and metric-DP's ε(ρ) alike. Nor does
    the released model, trained on the clean states, give its querier an ε(ρ)."""
    if metric_dp:
        why = (
            "boundary nodes' exact degrees go to the server and the clients holding them as "
            "halo nodes in the clear; metric-DP noise on their hidden states is no (ε, δ) "
            "guarantee"
        )
    else:
        why = (
            "boundary nodes' hidden states and exact degrees go to the server and the "
            "clients holding them as halo nodes without noise"
        )
    out = (NoGuarantee(why, Scope("client", "replace one client's data", RECEIVERS)),)
    if metric_dp:
        degrees = "boundary nodes' exact degrees go out in the clear beside the noisy states"
        trained = (
            "the released model is trained on the clean hidden states by their owners, not "
            "on the noisy releases"
        )
        querier = Scope("node", METRIC_SCOPE.neighbouring, ("querier",))
        out += (NoGuarantee(degrees, EXCHANGED, True), NoGuarantee(trained, querier, True))
    return out


def node_loss(c: HaloClient, est: Estimators, buffer: Halo, cfg: CEFedGNNConfig, gen):
    """A loss on a fresh minibatch of the client's training nodes at each call; None if it
    has none."""
    train = torch.nonzero(c.data.train_mask).squeeze(1)
    if train.numel() == 0:
        return None
    halo = local_halo(c, buffer)

    def loss(model: nn.Module) -> torch.Tensor:
        seeds = train[torch.randperm(train.numel(), generator=gen)[: cfg.batch_size]]
        logits = estimated_logits(
            model, c, est, halo.hidden, halo.degree, seeds, cfg.gamma, cfg.fanout, gen
        )
        return F.cross_entropy(logits, c.data.y[seeds])

    return loss


def edge_loss(c, edges, est, buffer: Halo, weights, cfg: CEFedGNNConfig, gen):
    """As ``node_loss``, on a minibatch of the client's training edges."""
    train = torch.nonzero(edges.split == 0).squeeze(1)
    if train.numel() == 0:
        return None
    halo = local_halo(c, buffer)

    def loss(model: nn.Module) -> torch.Tensor:
        batch = train[torch.randperm(train.numel(), generator=gen)[: cfg.batch_size]]
        return edge_batch_loss(
            model, c, edges, est, halo, batch, weights, cfg.gamma, cfg.fanout, gen
        )

    return loss


def node_predictions(model, c: HaloClient, halo: Halo, split: str):
    """The client's (labels, logits) on its own nodes of ``split``, full neighbourhoods."""
    mask = getattr(c.data, f"{split}_mask")[: c.num_own]
    if not mask.any():
        return None
    classes = model.convs[-1].out_channels
    scratch = Estimators.zeros(c.num_own, halo.hidden.shape[1], classes)
    nodes = torch.arange(c.num_own)
    logits = estimated_logits(model, c, scratch, halo.hidden, halo.degree, nodes, 1.0, None)
    return c.data.y[nodes][mask].numpy(force=True), logits[mask]


def release_payload(
    c: HaloClient, est: Estimators, with_output: bool, mdp, noise, log: list
) -> dict:
    """The boundary nodes whose hidden estimator moved since the last release: their hidden
    states (and, for the edge task, final embeddings h^(L), which Eq. 8 reads for a remote
    endpoint), with metric-DP each L2-normalised and perturbed by N(0, σ0² I), one draw per
    vector (``log`` gets each (ids, clean, noisy) for the evaluator); and their degrees. The
    others are not sent."""
    moved = c.boundary[est.touched[c.boundary]]
    vectors = {"h": torch.relu(est.hidden[moved])}
    if with_output:
        vectors["h_out"] = torch.relu(est.output[moved])
    if mdp is not None:
        clean = {key: normalise(v) for key, v in vectors.items()}
        vectors = {key: perturb(v, mdp.sigma0, noise) for key, v in clean.items()}
        ids = c.data.global_id[moved].numpy(force=True)
        log += [
            (ids, clean[k].double().numpy(force=True), vectors[k].double().numpy(force=True))
            for k in clean
        ]
    est.touched[:] = False
    return {"global_id": c.data.global_id[moved], **vectors, "degree": c.degree[moved]}


def local_halo(c: HaloClient, buffer: Halo) -> Halo:
    """The client's halo as the server's buffer holds it; ``degree`` over all local nodes:
    own nodes' as the client sees them (all their edges), halo nodes' as released."""
    degree = c.degree.clone()
    degree[c.num_own :] = buffer.degree[c.halo]
    return Halo(buffer.hidden[c.halo], buffer.output[c.halo], degree)


def gnn_of(model: nn.Module) -> nn.Module:
    """The node GNN the spec builds: an edge model's encoder, or the model itself."""
    return model.gnn if isinstance(model, EdgeModel) else model


NO_POSTERIORS = (
    "ce-fedgnn on an edge task releases node embeddings and an edge head, no node posteriors"
)


@storable
class EncoderAPI(NodeQueryAPI):
    """An edge-classification target's GNN answers node embeddings; it has no node classes."""

    def logits(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        raise NotApplicableError(NO_POSTERIORS)

    def answers(
        self, hops: Sequence[int], known: Data | None, embeddings: bool = True
    ) -> AnswerTable:
        """Embeddings, asked or not: they are all this deployment answers."""
        every = np.arange(self.num_nodes)
        embeddings = {h: self.embeddings(every, h) for h in hops}
        return AnswerTable(None, embeddings, None, known, NO_POSTERIORS)


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


TARGETS.register("ce-fedgnn")(CEFedGNN())
