"""FedAvg on Flower (``flwr``), the federated-learning framework people deploy: clients as
a Flower ``ClientApp``, the server as Flower's ``FedAvg`` strategy (wrapped in Flower's own
fixed-clipping DP, or clients under ``LocalDpMod``), every message recorded in the transcript
with its serialised size, so every attack on the built-in FedAvg runs on it. Flower is the
optional extra ``fgl-workbench[flower]``; only ``fit`` imports it."""

from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.target import Flower

__all__ = ["Flower", "FlowerConfig"]
