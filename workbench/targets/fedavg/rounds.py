"""FedAvg's round loop: sampling clients, local training, what each upload passes through
(Gaussian upload, DP-FedAvg, secure aggregation), aggregation, selection and release."""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from fgl_workbench.data.datasets import GraphDataset, NodeDataset
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses import dp_fedavg, gaussian_upload
from fgl_workbench.defenses.base import accounted, with_selection_caveat
from fgl_workbench.defenses.calibration import require_noise
from fgl_workbench.defenses.dp_fedavg import (
    aggregate_mean,
    apply_update,
    server_noise,
    update_vector,
)
from fgl_workbench.defenses.dp_sgd import (
    private_optimizer,
)
from fgl_workbench.defenses.information_bottleneck import bottleneck_clients
from fgl_workbench.defenses.metric_dp import ledger_event as metric_event
from fgl_workbench.defenses.metric_dp import publish_embeddings
from fgl_workbench.defenses.secure_aggregation import Session
from fgl_workbench.device import seeded_generator
from fgl_workbench.models import ModelSpec
from fgl_workbench.progress import report_round
from fgl_workbench.query import (
    GraphOwnerRoutedQueryAPI,
    OwnerRoutedQueryAPI,
    serve,
)
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.base import TrainedTarget
from fgl_workbench.targets.fedavg.config import NOT_IN_RECIPE, FedAvgConfig, recipe_excludes
from fgl_workbench.targets.fedavg.privacy import Accounting
from fgl_workbench.targets.fedavg.states import (
    average_states,
    check_kept_modules,
    load_shared,
    shared_part,
    weighted_update,
)
from fgl_workbench.targets.fine_tuning import fine_tuned
from fgl_workbench.targets.training import (
    Release,
    ReleaseRule,
    TrainingRecipe,
    make_optimizer,
    mean_loss,
    measuring_losses,
    release_rule,
    score_personalised,
    source_aucs,
)
from fgl_workbench.transcript import (
    CIPHERTEXT,
    MODEL_WEIGHTS,
    SERVER,
    Transcript,
    client,
)

# a round's validation scores where nothing reads them
UNREAD = {"accuracy": float("nan")}


class FedAvgLoop(Accounting):
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
            if dp_sgd is None or self.num_train(clients[k]) == 0:  # never steps
                return opt
            return private_optimizer(opt, dp_sgd, self.num_train(clients[k]), sgd_noise)

        opts = [optimizer(k) for k in range(len(clients))]
        dp_steps = np.zeros(len(clients), dtype=int)
        noisy_uploads = np.zeros(len(clients), dtype=int)
        server_load = np.zeros(len(clients))  # what the server sees of each client's rounds
        weights = np.array([self.weight(c) for c in clients], dtype=float)
        history: list[dict[str, float]] = []
        release = Release(release_rule(cfg.release, accounted(defenses)))
        validated = self.validation_rounds(cfg, release.rule, clients)
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
            losses: list[torch.Tensor] = []
            for k in chosen.tolist():
                load_shared(local[k], state, cfg.keep_local)
                if not cfg.persistent_optimizer:
                    opts[k] = optimizer(k)
                with measuring_losses() as steps:
                    # a client holding no training record (many clients, few graphs) sends
                    # back the model it received, weighted 0
                    if self.num_train(clients[k]) > 0:
                        dp_steps[k] += self.train_local(
                            local[k], clients[k], opts[k], cfg, gen, dp_sgd
                        )
                losses += steps
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
                mean = aggregate_mean(total, dp is not None, cfg.client_fraction * len(clients))
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
            val = scores("val") if r in validated else UNREAD
            history.append(
                {"round": r, **mean_loss(losses), "val_accuracy": val["accuracy"], **scored_apart}
            )
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
            # every client holds the CKKS secret key (it decrypts each round's aggregate)
            keys=None if secure is None else secure.keys,
            # an embedding release (metric-DP) serves no posteriors; personalised models are
            # reached by owner through ``query``
            served=serve(global_model, clients, ds.num_items)
            if isinstance(ds, NodeDataset) and mdp is None and cfg.fine_tune is None
            else None,
        )

    def config(self, config: Any) -> FedAvgConfig:
        return config if isinstance(config, self.Config) else self.Config(**(config or {}))

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

    @staticmethod
    def validation_rounds(
        cfg: FedAvgConfig, rule: ReleaseRule, clients: Sequence[Any]
    ) -> Collection[int]:
        """The rounds whose validation scores are computed (the others record NaN): every
        round here, as graph-level scoring draws each loader's seed from the global generator
        that training draws from too, so skipping it would change the trained weights."""
        return range(cfg.rounds)

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
