"""The ``flower`` target's configuration: FedAvg's local training, Flower's sampling and DP
wrappers, and what the clients report back."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.models import ModelConfig
from fgl_workbench.targets.fedavg.config import FedAvgConfig
from fgl_workbench.transcript import KeepPayloads


class FlowerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: ModelConfig = ModelConfig()
    rounds: int = Field(100, ge=1, le=10_000)
    local_epochs: int = Field(3, ge=1, le=1000)
    lr: float = Field(0.01, gt=0.0, le=10.0)
    weight_decay: float = Field(5e-4, ge=0.0)
    optimizer: Literal["adam", "sgd"] = "adam"
    batch_size: int = Field(32, ge=1, description="graph level only")
    client_fraction: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="round(fraction · clients) clients a round, drawn without replacement "
        "(Flower's fixed-size sampling, not Poisson)",
    )
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
    keep_payloads: KeepPayloads = "last_round"
    backend: Literal["inline", "simulation"] = Field(
        "inline",
        description="inline: Flower's strategy and ClientApps in this process, each message "
        "delivered in turn; simulation: Flower's simulation engine, the ClientApps on its Ray "
        "actors (same numbers, clients in parallel)",
    )
    simulation_workers: int = Field(
        2, ge=1, le=1024, description="Ray actors running ClientApps under backend: simulation"
    )

    def local(self) -> FedAvgConfig:
        """The built-in FedAvg config whose local training each ClientApp runs."""
        return FedAvgConfig(
            model=self.model,
            rounds=self.rounds,
            local_epochs=self.local_epochs,
            lr=self.lr,
            weight_decay=self.weight_decay,
            optimizer=self.optimizer,
            batch_size=self.batch_size,
            client_fraction=self.client_fraction,
        )

    def per_round(self, num_clients: int) -> int:
        """The fixed number of clients Flower samples each round."""
        return max(1, int(round(self.client_fraction * num_clients)))
