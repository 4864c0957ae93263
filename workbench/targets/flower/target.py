"""The registered ``flower`` target: FedAvg's clients and server as Flower apps, run through
a Flower ``Grid`` whose every message the transcript records, with Flower's own DP code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses.calibration import require_noise
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelSpec
from fgl_workbench.query import serve
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.fedavg.graph import GraphFedAvg
from fgl_workbench.targets.fedavg.node import NodeFedAvg
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.transcript import METRICS, Transcript

SUPPORTED_DEFENSES = ("dp-fedavg",)
# how many actors run the clients and where the deployment is: not what they compute
RUN_ONLY = {"simulation_workers", "deployment"}
MODULUS = 2**32  # Flower's SecAgg+ modulus_range (its default, which the target keeps)


def run_only(cfg: FlowerConfig) -> set[str]:
    """Settings that change no number of the run, left out of its recipe: the actor count,
    the deployment's whereabouts, and the backend where every client takes part (with fewer,
    Flower samples node ids, which its simulation draws at random, so the two backends sample
    different clients). A deployment's references train inline whatever the fraction: their
    federations are not the cell's, so no SuperNode could rebuild them."""
    same = cfg.client_fraction == 1.0 or cfg.backend == "deployment"
    return RUN_ONLY | ({"backend"} if same else set())


def require_flower() -> None:
    """Flower is an optional extra: say how to install it rather than fail on an import."""
    try:
        import flwr  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            "target: flower needs Flower (Python 3.11+); install it with "
            "pip install 'fgl-workbench[flower]'"
        ) from e


class Flower:
    """FedAvg on Flower's engine, at node or graph level by the federation's."""

    name = "flower"
    level = "any"
    Config = FlowerConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        require_flower()
        require_noise(self.name, defenses)
        from fgl_workbench.targets.flower.engine import run_federation

        cfg = self.config(config)
        self._check(defenses, cfg, len(federation.clients))
        dp = next((d.config for d in defenses if d.name == "dp-fedavg"), None)
        # Flower samples clients with random and draws its DP noise from np.random (a
        # deployed ServerApp seeds its own process alike)
        server_seed = derive_seed(seed, "flower")
        seed_everything(server_seed)
        ds = federation.dataset
        loop = NodeFedAvg() if ds.level == "node" else GraphFedAvg()
        spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, ds.level)
        global_model = spec.build()
        clients = federation.clients
        transcript = Transcript(cfg.keep_payloads, always_keep=(METRICS,))
        run = run_federation(
            loop,
            clients,
            spec,
            global_model,
            cfg,
            dp,
            transcript,
            derive_seed(seed, "flower-clients"),
            server_seed,
            federation.recipe,
        )
        global_model.load_state_dict(run.arrays)
        test = loop.score(global_model, clients, "test")
        utility = {
            **run.figures,  # first: a figure never stands in for what is measured here
            "accuracy": test["accuracy"],
            "macro_f1": test["macro_f1"],
            "macro_f1_all": test["macro_f1_all"],
            "auc": test["auc"],
            "best_round": float(cfg.rounds - 1),
        }
        return TrainedTarget(
            name=self.name,
            level=ds.level,
            global_model=global_model,
            client_models=dict.fromkeys(range(len(clients)), global_model),
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                # what changes no number is left out (references then train inline)
                {**cfg.model_dump(exclude=run_only(cfg)), "keep_payloads": "none"},
                len(clients),
                sum(loop.num_train(c) for c in clients),
                tuple(defenses),
            ),
            query=loop.query_api(global_model, federation),
            transcript=transcript,
            ledger=run.ledger,
            utility=utility,
            history=run.history,
            served=serve(global_model, clients, ds.num_items)
            if isinstance(ds, NodeDataset)
            else None,
        )

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """``fit``'s ledger before training: the busiest client uploads every round."""
        from fgl_workbench.targets.flower.engine import ledger, num_params

        cfg = self.config(config)
        self._check(defenses, cfg, len(federation.clients))
        dp = next((d.config for d in defenses if d.name == "dp-fedavg"), None)
        n = len(federation.clients)
        ds = federation.dataset
        model = ModelSpec(cfg.model, ds.num_features, ds.num_classes, ds.level).build()
        return ledger(cfg, dp, n, cfg.rounds, num_params(model))

    def config(self, config: Any) -> FlowerConfig:
        return config if isinstance(config, FlowerConfig) else FlowerConfig(**(config or {}))

    def _check(self, defenses: Sequence[Any], cfg: FlowerConfig, num_clients: int) -> None:
        for d in defenses:
            if d.name not in SUPPORTED_DEFENSES:
                raise ConfigError(
                    f"defenses: flower runs Flower's own DP code and cannot apply '{d.name}'; "
                    f"it supports: {', '.join(SUPPORTED_DEFENSES)}"
                )
        if cfg.secure_aggregation == "secaggplus":
            check_secaggplus(cfg, defenses, num_clients)


def check_secaggplus(cfg: FlowerConfig, defenses: Sequence[Any], num_clients: int) -> None:
    """What Flower's SecAgg+ (legacy workflow only) cannot run, refused before training."""
    field = "secure_aggregation: secaggplus"
    dp = next((d.config for d in defenses if d.name == "dp-fedavg"), None)
    if dp is not None and dp.mode == "central" and cfg.dp_clipping == "server":
        raise ConfigError(
            f"dp_clipping: server cannot run with {field}: the server holds only the masked "
            "sum, never an update to clip (Flower's server-side wrapper would clip the "
            "aggregate); use dp_clipping: client (fixedclipping_mod inside secaggplus_mod)"
        )
    m = cfg.per_round(num_clients)
    if m < 2:
        raise ConfigError(
            f"client_fraction: {field} needs at least 2 clients a round (Flower's SecAgg+ "
            f"masks among them; got {m} of {num_clients})"
        )
    if m * cfg.secaggplus.quantization_range >= MODULUS:
        raise ConfigError(
            f"secaggplus.quantization_range: {m} clients' quantised sums reach "
            f"{m} × {cfg.secaggplus.quantization_range}, past SecAgg+'s modulus 2^32: the sum "
            f"would wrap around; lower it below {MODULUS // m}"
        )


TARGETS.register("flower")(Flower())
