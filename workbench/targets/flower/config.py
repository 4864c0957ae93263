"""The ``flower`` target's configuration: FedAvg's local training, Flower's sampling and DP
wrappers, and what the clients report back."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from fgl_workbench.targets.fedavg.config import FedAvgConfig

# FedAvg's fields the Flower clients' local training, the rounds and the transcript read, declared
# once (in FedAvgConfig) with their bounds and defaults
SHARED = (
    "model",
    "rounds",
    "local_epochs",
    "lr",
    "weight_decay",
    "optimizer",
    "batch_size",
    "keep_payloads",
)
_FedAvgFields = create_model(
    "_FedAvgFields",
    __config__=ConfigDict(extra="forbid", allow_inf_nan=False),
    **{n: (f.annotation, f) for n, f in FedAvgConfig.model_fields.items() if n in SHARED},
)


LOCAL = "local"


class DeploymentConfig(BaseModel):
    """Where Flower's Deployment Engine runs the federation, and how long it may take."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    superlink: str = Field(
        LOCAL,
        description="'local': a SuperLink and one SuperNode per client started for the run as "
        "processes on 127.0.0.1 (insecure); else HOST:PORT of a running SuperLink (its "
        "Control API), whose SuperNodes were started with --node-config "
        "'partition-id=K num-partitions=N', one per client",
    )
    root_certificates: str | None = Field(
        None,
        description="PEM file of the CA that signed a remote SuperLink's certificate (TLS); "
        "none: the connection is insecure, as flower-superlink --insecure serves it",
    )
    record_dir: str | None = Field(
        None,
        description="folder the ServerApp writes what it recorded into and reads the initial "
        "model from: it runs where the SuperLink runs, so a remote SuperLink needs a folder "
        "it shares with this process; none: a temporary folder here (local or same machine)",
    )
    connect_timeout: float = Field(
        120.0,
        gt=0.0,
        le=86_400.0,
        description="seconds for the SuperLink to come up and every SuperNode to connect",
    )
    round_timeout: float = Field(
        600.0, gt=0.0, le=86_400.0, description="seconds a round waits for the nodes' replies"
    )
    run_timeout: float = Field(
        3600.0, gt=0.0, le=604_800.0, description="seconds `flwr run` may take in all"
    )

    @field_validator("superlink")
    @classmethod
    def _address(cls, value: str) -> str:
        if value == LOCAL:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected 'local' or HOST:PORT with a port 1-65535 (got {value!r})")
        return value


class FlowerConfig(_FedAvgFields):  # type: ignore[misc,valid-type]
    client_fraction: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="round(fraction · clients) clients a round, drawn without replacement "
        "(Flower's fixed-size sampling, not Poisson)",
    )
    strategy: Literal["fedavg", "fedprox"] = Field(
        "fedavg",
        description="Flower's FedAvg, or FedProx (its proximal_mu sent to the clients, which add "
        "mu/2·‖w − w_global‖² to their loss)",
    )
    proximal_mu: float = Field(0.01, ge=0.0, le=1e6, description="FedProx's μ")
    dp_clipping: Literal["server", "client"] = Field(
        "server",
        description="under dp-fedavg central: Flower's DifferentialPrivacyServerSideFixedClipping "
        "(the server clips each update) or ...ClientSideFixedClipping with fixedclipping_mod "
        "(each client clips its own); dp-fedavg local runs LocalDpMod on every client",
    )
    report_metrics: bool = Field(
        True,
        description="clients send back their training loss and example count, and evaluate "
        "every round's model on their validation data (Flower's federated evaluation); off, "
        "a train reply carries its arrays and a constant weight only",
    )
    backend: Literal["inline", "simulation", "deployment"] = Field(
        "inline",
        description="inline: Flower's strategy and ClientApps in this process, each message "
        "delivered in turn; simulation: Flower's simulation engine, the ClientApps on its Ray "
        "actors; deployment: Flower's Deployment Engine, the apps as a FAB `flwr run` submits "
        "to a SuperLink, each SuperNode rebuilding its own client's data (see deployment). "
        "The same numbers where every client takes part; another sample of clients "
        "otherwise, as the engines' node ids are random",
    )
    deployment: DeploymentConfig = Field(
        default_factory=DeploymentConfig, description="under backend: deployment"
    )
    simulation_workers: int = Field(
        2, ge=1, le=1024, description="Ray actors running ClientApps under backend: simulation"
    )

    def local(self) -> FedAvgConfig:
        """The built-in FedAvg config whose local training each ClientApp runs."""
        return FedAvgConfig(**self.model_dump(include=set(SHARED)))

    def per_round(self, num_clients: int) -> int:
        """The fixed number of clients Flower samples each round."""
        return max(1, int(round(self.client_fraction * num_clients)))
