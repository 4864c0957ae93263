"""FedAvg at graph level: minibatch epochs (or DP-SGD steps) on each client's training graphs."""

from __future__ import annotations

from torch import nn

from fgl_workbench.data.datasets import GraphDataset
from fgl_workbench.data.federation import Federation, GraphClient
from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
    steps_for,
    train_graph_epochs_dp,
)
from fgl_workbench.query import (
    GraphQueryAPI,
)
from fgl_workbench.targets.fedavg.config import FedAvgConfig
from fgl_workbench.targets.fedavg.rounds import FedAvgLoop
from fgl_workbench.targets.training import (
    score_graph_clients,
    score_graph_personalised,
    train_graph_epochs,
)


class GraphFedAvg(FedAvgLoop):
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
