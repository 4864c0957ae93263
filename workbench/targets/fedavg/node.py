"""FedAvg at node level: each client trains on its own subgraph, weighted by its nodes."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from torch import nn

from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation, NodeClient
from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
)
from fgl_workbench.query import (
    NodeQueryAPI,
)
from fgl_workbench.targets.fedavg.config import FedAvgConfig
from fgl_workbench.targets.fedavg.rounds import FedAvgLoop
from fgl_workbench.targets.minibatch import neighbour_batches, train_node_minibatch_epochs
from fgl_workbench.targets.training import (
    ReleaseRule,
    score_node_clients,
    score_personalised,
    train_node_epochs,
)


class NodeFedAvg(FedAvgLoop):
    level = "node"

    @staticmethod
    def weight(c: NodeClient) -> float:
        """The client's nodes; 0 where none is a training node: it trains nothing and sends
        back the model it received, which would only pull the mean back towards it."""
        return float(c.num_nodes) if bool(c.data.train_mask.any()) else 0.0

    @staticmethod
    def num_train(c: NodeClient) -> int:
        return int(c.data.train_mask.sum())

    @staticmethod
    def train_local(model: nn.Module, c: NodeClient, opt, cfg: FedAvgConfig, gen, dp_sgd) -> int:
        if cfg.sampling is None:
            train_node_epochs(model, c.data, opt, cfg.local_epochs)
        else:
            batches = neighbour_batches(c.data, cfg.sampling.fanouts, cfg.sampling.batch_size)
            train_node_minibatch_epochs(model, c.data, opt, cfg.local_epochs, batches, gen)
        return 0

    @staticmethod
    def dp_steps_per_round(cfg: FedAvgConfig, dp_sgd: DPSGDConfig | None) -> int:
        return 0  # DP-SGD is refused at node level

    @staticmethod
    def validation_rounds(
        cfg: FedAvgConfig, rule: ReleaseRule, clients: Sequence[NodeClient]
    ) -> Collection[int]:
        """Only the rounds whose validation is read: every round to select the best one, the
        last round's for the reported ``val_accuracy`` under ``last``, and none where no client
        holds validation nodes (reference models). With ``eval_dropout`` scoring draws dropout
        masks from training's generator, so every round is scored to keep the weights."""
        if cfg.eval_dropout:
            return range(cfg.rounds)
        if not any(bool(c.data.val_mask.any()) for c in clients):
            return ()
        return range(cfg.rounds) if rule == "best_val" else (cfg.rounds - 1,)

    score = staticmethod(score_node_clients)
    score_each = staticmethod(score_personalised)

    @staticmethod
    def query_api(model: nn.Module, federation: Federation) -> NodeQueryAPI:
        assert isinstance(federation.dataset, NodeDataset)
        return NodeQueryAPI(model, federation.dataset.data)
