"""The ``flower`` target's configuration: FedAvg's local training, Flower's sampling and DP
wrappers, and what the clients report back."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

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


class SecAggPlusConfig(BaseModel):
    """Flower's ``SecAggPlusWorkflow`` settings (its defaults where it has them; its modulus
    is fixed at 2^32)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    num_shares: int | float = Field(
        1.0,
        gt=0,
        description="shares each client's keys are split into: an integer (> 2), or a "
        "fraction (≤ 1) of the sampled clients (1.0: every sampled client is every other's "
        "neighbour, as in SecAgg)",
    )
    reconstruction_threshold: int | float = Field(
        0.5,
        gt=0,
        description="shares that rebuild a key: an integer (< an integer num_shares), or a "
        "fraction (≤ 1) of num_shares (at least 2)",
    )
    clipping_range: float = Field(
        8.0,
        gt=0.0,
        le=1e6,
        description="every weighted parameter is clipped to [−range, range] on the client "
        "before it is quantised",
    )
    quantization_range: int = Field(
        4194304,
        ge=2,
        lt=2**32,
        description="integers [0, range) a clipped parameter is stochastically rounded to "
        "(below the protocol's modulus, 2^32)",
    )
    max_weight: float | None = Field(
        None,
        gt=0.0,
        description="the largest weight a client may send (the masked vector carries "
        "weight/max_weight · parameters); default: the largest the clients send (1 under "
        "dp-fedavg's equal weights), so no precision is lost to an unused range",
    )

    @model_validator(mode="after")
    def _flower_bounds(self) -> SecAggPlusConfig:
        """Flower's own checks, as config errors naming the field."""
        shares, t = self.num_shares, self.reconstruction_threshold
        if isinstance(shares, int) and shares == 2:
            raise ValueError("num_shares: an integer must be greater than 2 (got 2)")
        if isinstance(shares, float) and shares > 1.0:
            raise ValueError(f"num_shares: a fraction must be at most 1 (got {shares})")
        if isinstance(t, float) and t > 1.0:
            raise ValueError(f"reconstruction_threshold: a fraction must be at most 1 (got {t})")
        if isinstance(t, int) and isinstance(shares, int) and t >= shares > 1:
            raise ValueError(
                f"reconstruction_threshold: must be less than num_shares ({t} >= {shares})"
            )
        return self


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
    secure_aggregation: Literal["none", "secaggplus"] = Field(
        "none",
        description="secaggplus: every train round runs Flower's SecAggPlusWorkflow (legacy "
        "DefaultWorkflow, FedAvg/FedProx and DP wrappers) with secaggplus_mod on the clients: "
        "real key agreement and pairwise masks, so the server sees the round's sum only",
    )
    secaggplus: SecAggPlusConfig = Field(
        default_factory=SecAggPlusConfig, description="SecAgg+'s settings"
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
