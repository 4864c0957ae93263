"""The ``flower`` target's configuration: FedAvg's local training, Flower's sampling and DP
wrappers, and what the clients report back."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, create_model

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
    backend: Literal["inline", "simulation"] = Field(
        "inline",
        description="inline: Flower's strategy and ClientApps in this process, each message "
        "delivered in turn; simulation: Flower's simulation engine, the ClientApps on its Ray "
        "actors (clients in parallel; the same numbers where every client takes part, "
        "another sample of clients otherwise, as its node ids are random)",
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
