"""FedAvg (McMahan et al. 2017) at node level (GCN/GraphSAGE/GAT on each client's subgraph)
and graph level (GIN with mean pooling).

Server weights: the number of nodes a client holds (labelled or not, as FedTAD's code does) at
node level; the number of training graphs at graph level. Every round the global model is
scored on every client's validation set; the released model is the best-validation round's
(the last round's under a DP defense, unless ``release: best_val`` asks for selection, whose ε
then says it excludes the validation records), and test accuracy is read for that round only.

With ``fine_tune`` (node level), each client then fine-tunes the released model on its own
training nodes and deploys the result: the "FedAvg + FT" baseline of personalised-FL papers
(O-pFGL's). Utility is the personalised models' on their own clients' test nodes, the global
model's beside it as ``global_*``.

With ``keep_local`` (graph level), the named modules stay with each client: only the others
are uploaded and averaged, and each client deploys its own model, the shared modules with its
own. GCFL's code, from which CeFGC's FedAvg figures come, shares only the GIN convolutions
(``keep_local: [project, head]``). Utility is then each client's model on its own data, and
every round is selected on the clients' own models' validation scores.

With ``score_local_models``, each client's locally trained model of every round is also scored
on its own validation data, and the best round's on its own test data is reported as
``local_*``: OpenFGL's default evaluation (``local_model_on_local_data``, run after the
aggregation but before the clients download the new model), by which papers built on it
report their FedAvg baselines. Only the figures change; nothing is released from it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import nn

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import GraphDataset, NodeDataset
from fgl_workbench.data.federation import Federation, GraphClient, NodeClient
from fgl_workbench.defenses import dp_fedavg, gaussian_upload
from fgl_workbench.defenses.base import accounted, with_selection_caveat
from fgl_workbench.defenses.calibration import require_noise
from fgl_workbench.defenses.dp_fedavg import (
    apply_update,
    ledger_events,
    server_noise,
    update_vector,
)
from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
    private_optimizer,
    steps_for,
    train_graph_epochs_dp,
)
from fgl_workbench.defenses.dp_sgd import ledger_event as dp_sgd_event
from fgl_workbench.defenses.gaussian_upload import ledger_events as upload_events
from fgl_workbench.defenses.information_bottleneck import bottleneck_clients
from fgl_workbench.defenses.metric_dp import ledger_event as metric_event
from fgl_workbench.defenses.metric_dp import publish_embeddings
from fgl_workbench.defenses.secure_aggregation import Session
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.progress import report_round
from fgl_workbench.query import (
    GraphOwnerRoutedQueryAPI,
    GraphQueryAPI,
    NodeQueryAPI,
    OwnerRoutedQueryAPI,
    serve,
)
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.fine_tuning import StageConfig, fine_tuned
from fgl_workbench.targets.training import (
    Release,
    ReleaseRule,
    TrainingRecipe,
    make_optimizer,
    release_rule,
    score_graph_clients,
    score_graph_personalised,
    score_node_clients,
    score_personalised,
    source_aucs,
    train_graph_epochs,
    train_node_epochs,
)
from fgl_workbench.transcript import (
    CIPHERTEXT,
    MODEL_WEIGHTS,
    SERVER,
    KeepPayloads,
    Transcript,
    client,
)


class FedAvgConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: ModelConfig = ModelConfig()
    rounds: int = Field(100, ge=1, le=10_000)
    local_epochs: int = Field(3, ge=1, le=1000)
    lr: float = Field(0.01, gt=0.0, le=10.0)
    weight_decay: float = Field(5e-4, ge=0.0)
    optimizer: Literal["adam", "sgd"] = "adam"
    persistent_optimizer: bool = Field(
        True, description="keep each client's optimizer state across rounds (FedTAD's code)"
    )
    client_fraction: float = Field(1.0, gt=0.0, le=1.0)
    batch_size: int = Field(32, ge=1, description="graph level only")
    release: ReleaseRule | None = Field(
        None,
        description="best_val or last round's model; default best_val, last under a DP defense",
    )
    keep_payloads: KeepPayloads = "last_round"
    eval_dropout: bool = Field(
        False,
        description="official-compat: keep dropout on when scoring (FedTAD's code does; it "
        "explains most of the gap to that paper's FedAvg figures, see docs/reproduction.md)",
    )
    fine_tune: StageConfig | None = Field(
        None,
        description="node level: each client fine-tunes the released model on its own training "
        "nodes (early-stopped on its validation nodes) and deploys its personalised model",
    )
    keep_local: list[str] = Field(
        default_factory=list,
        description="graph level: modules (by name: project, convs, head) each client keeps to "
        "itself, neither uploaded nor averaged; GCFL's code keeps [project, head]",
    )
    score_local_models: bool = Field(
        False,
        description="official-compat: also report local_* scores, each client's locally "
        "trained model of the best round on its own data (OpenFGL's default evaluation)",
    )

    @field_validator("keep_local")
    @classmethod
    def _one_order(cls, names: list[str]) -> list[str]:
        """The same modules in any order or repeated are the same setting (and recipe)."""
        return sorted(set(names))


# Secure aggregation changes the model only by its grid rounding, so references train without
# it rather than pay for encryption N times; metric-DP acts on the release, not the training.
NOT_IN_RECIPE = ("secure-aggregation", "metric-dp")


def shared_part(state: dict[str, torch.Tensor], keep_local: Sequence[str]) -> dict:
    """The entries of a model's state outside the modules its client keeps to itself."""
    return {k: v for k, v in state.items() if k.split(".", 1)[0] not in keep_local}


def load_shared(model: nn.Module, state: dict, keep_local: Sequence[str]) -> None:
    """Loads ``state`` into ``model``: every parameter but those of the modules its client
    keeps (all of them without ``keep_local``), and nothing else."""
    result = model.load_state_dict(state, strict=False)
    missing = {k.split(".", 1)[0] for k in result.missing_keys}
    if result.unexpected_keys or not missing <= set(keep_local):
        raise RuntimeError(
            f"a shared state must hold every module but {sorted(keep_local)}: missing "
            f"{result.missing_keys}, unexpected {result.unexpected_keys}"
        )


def check_kept_modules(keep_local: Sequence[str], model: nn.Module) -> None:
    """``keep_local`` names modules of ``model`` and leaves one to share."""
    if not keep_local:
        return
    modules = [n for n, _ in model.named_children()]
    unknown = sorted(set(keep_local) - set(modules))
    if unknown:
        raise ConfigError(
            f"keep_local: {', '.join(unknown)} is not a module of the model "
            f"(expected some of: {', '.join(modules)})"
        )
    if set(modules) <= set(keep_local):
        raise ConfigError("keep_local: every module is kept local, nothing is shared")


def recipe_excludes(cfg: FedAvgConfig) -> set[str]:
    """Fields left out of the recipe: how it is scored, and the options left off, so a
    recipe's identity (which seeds the reference models) is the one it had before they
    existed."""
    left_off = {name for name in ("fine_tune", "keep_local") if not getattr(cfg, name)}
    return {"score_local_models"} | left_off


def weighted_update(local: dict, reference: dict, weight: float) -> torch.Tensor:
    """weight · (local − reference), followed by the weight itself: summed over clients, the
    last entry is the denominator of the weighted mean (so no weight travels in the clear)."""
    update = update_vector(local, reference) * weight
    return torch.cat([update, torch.tensor([weight], dtype=torch.float64)])


def average_states(states: Sequence[dict[str, torch.Tensor]], weights: np.ndarray) -> dict:
    w = torch.tensor(weights / weights.sum(), dtype=torch.float32)
    return {k: sum(wi * s[k].float() for wi, s in zip(w, states, strict=True)) for k in states[0]}


class _FedAvg:
    """The round loop; subclasses supply local training and scoring for their level."""

    name = "fedavg"
    Config = FedAvgConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        require_noise(self.name, defenses)
        cfg = self.config(config)
        self.check_personalisation(cfg, defenses)
        on = {d.name: d.config for d in defenses}
        dp, dp_sgd, gauss = on.get("dp-fedavg"), on.get("dp-sgd"), on.get("gaussian-upload")
        ib, mdp = on.get("information-bottleneck"), on.get("metric-dp")
        sa = on.get("secure-aggregation")
        secure = None if sa is None else Session.start(sa)
        rng = seed_everything(derive_seed(seed, "fedavg"))
        noise = seeded_generator(derive_seed(seed, "dp-noise"))
        ds = federation.dataset
        spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, ds.level)
        make = spec.build
        global_model = make()
        check_kept_modules(cfg.keep_local, global_model)
        clients = federation.clients
        transcript = Transcript(cfg.keep_payloads)
        ib_kl = None
        if ib is not None:
            clients, ib_kl = bottleneck_clients(clients, ib, ds, transcript, seed)
        local = [make() for _ in clients]
        own = dict(enumerate(local))  # client → its model (trained in place throughout)
        gen = seeded_generator(derive_seed(seed, "batches"))
        sgd_noise = seeded_generator(derive_seed(seed, "dp-sgd-noise"))

        def optimizer(k: int) -> torch.optim.Optimizer:
            opt = make_optimizer(cfg.optimizer, local[k], cfg.lr, cfg.weight_decay)
            if dp_sgd is None:
                return opt
            return private_optimizer(opt, dp_sgd, self.num_train(clients[k]), sgd_noise)

        opts = [optimizer(k) for k in range(len(clients))]
        dp_steps = np.zeros(len(clients), dtype=int)
        noisy_uploads = np.zeros(len(clients), dtype=int)
        server_load = np.zeros(len(clients))  # what the server sees of each client's rounds
        weights = np.array([self.weight(c) for c in clients], dtype=float)
        history: list[dict[str, float]] = []
        release = Release(release_rule(cfg.release, accounted(defenses)))
        local_release = Release("best_val")  # OpenFGL's selection of its local models
        per_round = max(1, int(round(cfg.client_fraction * len(clients))))
        # length of an encrypted contribution: every float parameter (+ the weight, without DP)
        encrypted_size = update_vector(*[global_model.state_dict()] * 2).numel() + (dp is None)

        def protect(upload: torch.Tensor) -> torch.Tensor:
            """What a client sends outside the rounds, noised like its updates (if at all)."""
            if gauss is None:
                return upload
            return gaussian_upload.privatize(upload, gauss, noise).reshape(upload.shape)

        # what the rounds select and release: the global model, or every client's own
        released = nn.ModuleList(local) if cfg.keep_local else global_model

        def scores(split: str) -> dict[str, float]:
            if cfg.keep_local:
                return self.score_each(own, clients, split, cfg.eval_dropout)
            return self.score(global_model, clients, split, cfg.eval_dropout)

        context = self.start(federation, clients, global_model, transcript, cfg, seed, protect)
        if gauss is not None:
            noisy_uploads += self.uploads_before_rounds
        for r in range(cfg.rounds):
            if dp is None:
                chosen = np.sort(rng.choice(len(clients), per_round, replace=False))
            else:  # Poisson sampling, as the subsampled-Gaussian accountant assumes
                chosen = dp_fedavg.poisson_clients(rng, len(clients), cfg.client_fraction)
            server_load[chosen] += 1.0 if secure is None else 1.0 / max(len(chosen), 1)
            state = shared_part(global_model.state_dict(), cfg.keep_local)
            if secure is None or r == 0:  # under secure aggregation clients decrypt the model
                transcript.broadcast(
                    r, SERVER, [client(k) for k in chosen.tolist()], MODEL_WEIGHTS, state
                )
            uploads = []
            for k in chosen.tolist():
                load_shared(local[k], state, cfg.keep_local)
                if not cfg.persistent_optimizer:
                    opts[k] = optimizer(k)
                dp_steps[k] += self.train_local(local[k], clients[k], opts[k], cfg, gen, dp_sgd)
                upload = shared_part(local[k].state_dict(), cfg.keep_local)
                if gauss is not None:  # clipped and noised before it leaves the client
                    noisy = gaussian_upload.privatize(update_vector(upload, state), gauss, noise)
                    upload = apply_update(state, noisy)
                    noisy_uploads[k] += 1
                if dp is None and secure is None:
                    msg = transcript.send(r, client(k), SERVER, MODEL_WEIGHTS, upload)
                    uploads.append(upload if msg.payload is None else msg.payload)
                    continue
                if dp is None:  # the weighted update and its weight, summed under encryption
                    update = weighted_update(upload, state, weights[k])
                else:
                    update = dp_fedavg.client_update(upload, state, dp, noise)
                    if dp.mode == "local":  # only the noisy model leaves the client
                        upload = apply_update(state, update)
                if secure is None:
                    transcript.send(r, client(k), SERVER, MODEL_WEIGHTS, upload)
                    uploads.append(update)
                else:
                    ciphertext = secure.client.encrypt(update.numpy(force=True))
                    transcript.send(r, client(k), SERVER, CIPHERTEXT, ciphertext)
                    uploads.append(ciphertext)
            if dp is None and secure is None:
                average = average_states(uploads, weights[chosen])
                load_shared(global_model, average, cfg.keep_local)
            elif secure is None:
                expected = cfg.client_fraction * len(clients)
                aggregate = dp_fedavg.server_aggregate(state, uploads, dp, expected, noise)
                global_model.load_state_dict(aggregate)
            else:
                extra = None if dp is None else server_noise(encrypted_size, dp, noise)
                addend = None if extra is None else extra.numpy(force=True)
                aggregate = secure.server.sum(uploads, encrypted_size, addend)
                everyone = [client(k) for k in range(len(clients))]
                transcript.broadcast(r, SERVER, everyone, CIPHERTEXT, aggregate)
                total = torch.as_tensor(secure.keys.decrypt(aggregate))
                mean = (
                    total / (cfg.client_fraction * len(clients)) if dp else total[:-1] / total[-1]
                )
                global_model.load_state_dict(apply_update(state, mean))
            self.after_aggregation(context, r, global_model, uploads, chosen)
            scored_apart = {}
            if cfg.score_local_models:  # the clients' models before they download this round's
                local_val = self.score_apart(own, clients, "val")
                local_release.offer(r, local_val["accuracy"], nn.ModuleList(local))
                scored_apart["local_val_accuracy"] = local_val["accuracy"]
            if cfg.keep_local:  # every client downloads the shared modules: its deployment
                downloaded = shared_part(global_model.state_dict(), cfg.keep_local)
                for model in local:
                    load_shared(model, downloaded, cfg.keep_local)
            val = scores("val")
            history.append({"round": r, "val_accuracy": val["accuracy"], **scored_apart})
            release.offer(r, val["accuracy"], released)
            report_round(r + 1, cfg.rounds, val_accuracy=val["accuracy"])

        release.load_into(released)
        if cfg.keep_local:  # the server's model: the shared modules (its own are unused)
            load_shared(
                global_model, shared_part(local[0].state_dict(), cfg.keep_local), cfg.keep_local
            )
        test = scores("test")
        utility = {
            "accuracy": test["accuracy"],
            "macro_f1": test["macro_f1"],
            "macro_f1_all": test["macro_f1_all"],
            "auc": test["auc"],
            "val_accuracy": release.val_accuracy,
            "best_round": float(release.round),
        }
        if ib_kl is not None:
            utility["ib_kl_nats"] = ib_kl
        if isinstance(ds, GraphDataset):
            utility.update(source_aucs(own if cfg.keep_local else global_model, clients, ds))
        if cfg.score_local_models:
            utility.update(self.local_scores(local, clients, local_release))
        if cfg.keep_local:
            deployed = own
            owner = federation.partition.owner(ds.num_items)
            query = GraphOwnerRoutedQueryAPI(deployed, owner, ds.graphs)
        elif cfg.fine_tune is None:
            deployed = own
            query = self.query_api(global_model, federation)
        else:
            tuned = [fine_tuned(global_model, c.data, cfg.fine_tune) for c in clients]
            deployed = {k: t.model for k, t in enumerate(tuned)}
            utility.update({f"global_{m}": v for m, v in test.items()})
            # the mean epoch whose weights the clients kept: reference clients, which hold
            # no validation records, train the stage's full epochs (set them near this)
            utility["fine_tune_epochs"] = float(np.mean([t.epoch for t in tuned]))
            utility.update(score_personalised(deployed, clients))
            query = OwnerRoutedQueryAPI(deployed, ds.data, federation.partition.owner(ds.num_items))
        ledger = self.ledger(
            cfg,
            defenses,
            int(dp_steps.max()),
            int(noisy_uploads.max()),
            float(server_load.max()),
            secure is not None,
        )
        ledger = with_selection_caveat(ledger, release.rule)
        metric_releases = None
        if mdp is not None:
            query, figures, metric_releases = publish_embeddings(
                global_model, federation, mdp, derive_seed(seed, "metric-dp"), transcript
            )
            utility.update(figures)
            ledger = ledger.record(metric_event(mdp))
        return TrainedTarget(
            name=self.name,
            level=ds.level,
            global_model=global_model,
            client_models=deployed,
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                {
                    # without fine-tuning the recipe's identity, which seeds the reference
                    # models, is the one it had before the option existed; scoring is not
                    # part of how the models train
                    **cfg.model_dump(exclude=recipe_excludes(cfg)),
                    "rounds": release.round + 1,
                    "release": "last",
                    "keep_payloads": "none",
                },
                len(clients),
                sum(self.num_train(c) for c in clients),
                tuple(d for d in defenses if d.name not in NOT_IN_RECIPE),
            ),
            query=query,
            transcript=transcript,
            ledger=ledger,
            utility=utility,
            history=history,
            metric_releases=metric_releases,
            # an embedding release (metric-DP) serves no posteriors; personalised models are
            # reached by owner through ``query``
            served=serve(global_model, clients, ds.num_items)
            if isinstance(ds, NodeDataset) and mdp is None and cfg.fine_tune is None
            else None,
        )

    def config(self, config: Any) -> FedAvgConfig:
        return config if isinstance(config, self.Config) else self.Config(**(config or {}))

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """The ledger ``fit`` will write, before training (calibration by ε): the same
        ``ledger`` with the counts only training tells at their most, as if the busiest client
        took part in every round (its DP-SGD steps and noisy uploads; under local DP-FedAvg
        what the server sees of its rounds, Σ 1/n_r ≤ rounds under secure aggregation).
        Nothing else depends on the run, so the real ε is at most this ledger's, and equal
        when every client takes part in every round (``client_fraction: 1``) or the count
        does not enter (central DP-FedAvg)."""
        cfg = self.config(config)
        self.check_personalisation(cfg, defenses)
        on = {d.name: d.config for d in defenses}
        steps = cfg.rounds * self.dp_steps_per_round(cfg, on.get("dp-sgd"))
        secure = "secure-aggregation" in on
        uploads = cfg.rounds + self.uploads_before_rounds
        ledger = self.ledger(cfg, defenses, steps, uploads, float(cfg.rounds), secure)
        return with_selection_caveat(ledger, release_rule(cfg.release, accounted(defenses)))

    def check_personalisation(self, cfg: FedAvgConfig, defenses: Sequence[Any]) -> None:
        """Options that deploy or score models no defense covers are refused beside it.
        Fine-tuning (node level) trains each client's deployment after the rounds, outside
        every mechanism the ledger accounts for and past what the IB or metric-DP transform;
        secure aggregation stays, as the aggregate it protects is intact. Local modules (graph
        level) are never noised by DP-FedAvg or the Gaussian upload and do not fit secure
        aggregation's vector; DP-SGD trains them with the rest, per record, and stays.
        ``score_local_models`` would report the clients' models before DP-FedAvg's or the
        Gaussian upload's noise as the defended target's figures."""
        options = (
            ("fine_tune", cfg.fine_tune, "node", {"secure-aggregation"}),
            ("keep_local", cfg.keep_local, "graph", {"dp-sgd"}),
            (
                "score_local_models",
                cfg.score_local_models,
                self.level,
                set(SUPPORTED_DEFENSES) - {"dp-fedavg", "gaussian-upload"},
            ),
        )
        for name, on, level, allowed in options:
            if not on:
                continue
            if self.level != level:
                raise ConfigError(
                    f"{name}: {level} level only (the federation is {self.level} level)"
                )
            other = sorted(d.name for d in defenses if d.name not in allowed)
            if other:
                raise ConfigError(
                    f"{name}: the models it deploys or scores are outside what "
                    f"{', '.join(other)} covers; drop {name} or the defense"
                )

    def local_scores(
        self, local: Sequence[nn.Module], clients: Sequence[Any], chosen: Release
    ) -> dict[str, float]:
        """``local_*``: the clients' local models of the round ``chosen`` kept, each on its own
        test data (copies: the models deployed stay the last round's)."""
        kept = copy.deepcopy(nn.ModuleList(local))
        chosen.load_into(kept)
        test = self.score_apart(dict(enumerate(kept)), clients, "test")
        test.update(val_accuracy=chosen.val_accuracy, best_round=float(chosen.round))
        return {f"local_{m}": v for m, v in test.items()}

    def score_apart(
        self, models: dict[int, nn.Module], clients: Sequence[Any], split: str
    ) -> dict[str, float]:
        """Each client's model on its own ``split``, on a forked random stream: graph loaders
        draw a seed, and scoring that releases nothing must leave training's draws as they
        were."""
        with torch.random.fork_rng():
            return self.score_each(models, clients, split)

    # uploads each client makes in ``start``, before the rounds: counted in the ledger
    uploads_before_rounds = 0

    def start(
        self,
        federation: Federation,
        clients: Sequence[Any],
        global_model: nn.Module,
        transcript: Transcript,
        cfg: Any,
        seed: int,
        protect: Callable[[torch.Tensor], torch.Tensor],
    ) -> Any:
        """Before the first round: what a method computes once (and may upload: each of its
        ``uploads_before_rounds`` uploads per client through ``protect``, which noises it
        under gaussian-upload); its result is handed to every ``after_aggregation``. FedAvg
        computes nothing."""
        return None

    def after_aggregation(
        self, context: Any, r: int, global_model: nn.Module, uploads: list, chosen: np.ndarray
    ) -> None:
        """After round ``r``'s aggregation, before validation: where a method post-processes
        the global model (FedTAD distils into it). FedAvg does nothing."""

    @staticmethod
    def ledger(
        cfg: FedAvgConfig,
        defenses: Sequence[Any],
        dp_steps: int,
        uploads: int,
        server_load: float,
        secure: bool,
    ) -> PrivacyLedger:
        """Client-level DP-FedAvg (``fgl_workbench.defenses.dp_fedavg.ledger_events``): central, one
        amplified event per round for parties who do not see the sample and none for the
        server; local, the rounds each client took part in, for everyone. DP-SGD and the
        Gaussian upload mechanism: the worst client's count (each record belongs to one
        client, so its ε is the one of the client holding it)."""
        events: list[Any] = []
        for d in defenses:
            if d.name == "dp-fedavg":
                q = cfg.client_fraction
                events += ledger_events(q, d.config, cfg.rounds, server_load, secure)
            elif d.name == "dp-sgd":
                events.append(dp_sgd_event(d.config, dp_steps))
            elif d.name == "gaussian-upload":
                events += upload_events(d.config, uploads)
        return PrivacyLedger(tuple(events))


class NodeFedAvg(_FedAvg):
    level = "node"

    @staticmethod
    def weight(c: NodeClient) -> float:
        return float(c.num_nodes)

    @staticmethod
    def num_train(c: NodeClient) -> int:
        return int(c.data.train_mask.sum())

    @staticmethod
    def train_local(model: nn.Module, c: NodeClient, opt, cfg: FedAvgConfig, gen, dp_sgd) -> int:
        train_node_epochs(model, c.data, opt, cfg.local_epochs)
        return 0

    @staticmethod
    def dp_steps_per_round(cfg: FedAvgConfig, dp_sgd: DPSGDConfig | None) -> int:
        return 0  # DP-SGD is refused at node level

    score = staticmethod(score_node_clients)
    score_each = staticmethod(score_personalised)

    @staticmethod
    def query_api(model: nn.Module, federation: Federation) -> NodeQueryAPI:
        assert isinstance(federation.dataset, NodeDataset)
        return NodeQueryAPI(model, federation.dataset.data)


class GraphFedAvg(_FedAvg):
    level = "graph"

    @staticmethod
    def weight(c: GraphClient) -> float:
        return float(len(c.train))

    @staticmethod
    def num_train(c: GraphClient) -> int:
        return len(c.train)

    @staticmethod
    def train_local(
        model: nn.Module, c: GraphClient, opt, cfg: FedAvgConfig, gen, dp_sgd: DPSGDConfig | None
    ) -> int:
        """Plain minibatch epochs, or DP-SGD steps (their count, for the ledger)."""
        if dp_sgd is not None:
            return train_graph_epochs_dp(model, c.train, opt, cfg.local_epochs, dp_sgd, gen)
        train_graph_epochs(model, c.train, opt, cfg.local_epochs, cfg.batch_size, gen)
        return 0

    @staticmethod
    def dp_steps_per_round(cfg: FedAvgConfig, dp_sgd: DPSGDConfig | None) -> int:
        """What ``train_local`` returns: ``local_epochs`` epochs of DP-SGD steps."""
        return 0 if dp_sgd is None else steps_for(dp_sgd, cfg.local_epochs)

    score = staticmethod(score_graph_clients)
    score_each = staticmethod(score_graph_personalised)

    @staticmethod
    def query_api(model: nn.Module, federation: Federation) -> GraphQueryAPI:
        assert isinstance(federation.dataset, GraphDataset)
        return GraphQueryAPI(model)


SUPPORTED_DEFENSES = (
    "dp-fedavg",
    "dp-sgd",
    "secure-aggregation",
    "information-bottleneck",
    "metric-dp",
    "gaussian-upload",
)


class FedAvg:
    """Dispatches to the node- or graph-level loop by the federation's level."""

    name = "fedavg"
    level = "any"
    Config = FedAvgConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        return self._level(federation, defenses).fit(federation, config, defenses, seed)

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """``fit``'s ledger before training (``_FedAvg.planned_ledger``), refused as ``fit``
        refuses."""
        return self._level(federation, defenses).planned_ledger(federation, config, defenses)

    @staticmethod
    def _level(federation: Federation, defenses: Sequence[Any]) -> _FedAvg:
        """The loop for the federation's level, once the defenses are known to fit it."""
        for d in defenses:
            if d.name not in SUPPORTED_DEFENSES:
                raise ConfigError(
                    f"defenses: fedavg cannot apply '{d.name}' (stage '{d.stage}'); "
                    f"it supports: {', '.join(SUPPORTED_DEFENSES)}"
                )
        names = {d.name for d in defenses}
        dp_kinds = sorted(names & {"dp-fedavg", "dp-sgd", "gaussian-upload"})
        if len(dp_kinds) > 1:
            raise ConfigError(
                f"defenses: {' and '.join(dp_kinds)} protect different neighbouring datasets "
                "(one client's data against the aggregate, one record, one client's data "
                "against the server); their ε do not compose into one figure, so run them as "
                "separate targets"
            )
        for name in ("information-bottleneck", "metric-dp"):
            if name in names and federation.level != "node":
                raise ConfigError(
                    f"defenses: {name} acts on node features or node embeddings and needs "
                    "node-level data (the federation is graph-level)"
                )
        if "dp-sgd" in names and federation.level == "node":
            raise ConfigError(
                "defenses: dp-sgd on fedavg is graph-level only (nodes of one graph are not "
                "independent records, so per-node clipping bounds nothing); node-level DP needs "
                "aggregation perturbation (GAP), which is not implemented yet"
            )
        return NodeFedAvg() if federation.level == "node" else GraphFedAvg()


TARGETS.register("fedavg")(FedAvg())
