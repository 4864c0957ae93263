"""FedGC's federated self-training (Sec. 3.3): before the information bottleneck, the clients
train a GCN φ_st together (FedAvg on their exchanged subgraphs) and each labels its own
unlabelled nodes with it, so the IB, which needs labels, has more than the few training ones.

Decisions (docs/methods/fedgc.md): FedAvg as the paper says (the code uses FedSGD); the
pseudo-labelled nodes are the client's own nodes outside its training and validation sets
(the paper labels every unlabelled node; keeping validation out leaves the IB's selection on
true labels); received neighbours are never labelled (they are other clients' nodes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation, NodeClient
from fgl_workbench.models import ModelConfig
from fgl_workbench.targets.fedavg import FedAvgConfig, NodeFedAvg
from fgl_workbench.targets.training import node_logits
from fgl_workbench.transcript import KeepPayloads, Transcript


@dataclass(frozen=True)
class SelfTrained:
    labels: tuple[
        tuple[torch.Tensor, torch.Tensor], ...
    ]  # per client: (y with pseudo-labels, mask)
    val_accuracy: float  # φ_st's, pooled over the clients' validation nodes
    pseudo_accuracy: float  # share of pseudo-labels that are right (scored, never used)
    transcript: Transcript  # the FedAvg run's messages


def self_train(
    federation: Federation,
    clients: Sequence[NodeClient],
    model: ModelConfig,
    rounds: int,
    keep_payloads: KeepPayloads,
    seed: int,
) -> SelfTrained:
    """Runs FedAvg on ``clients`` (the federation's clients, possibly grown by the exchange)
    and pseudo-labels their unlabelled own nodes with the validation-best global model."""
    assert isinstance(federation.dataset, NodeDataset)
    grown = Federation(federation.dataset, federation.partition, tuple(clients))
    cfg = FedAvgConfig(model=model, rounds=rounds, local_epochs=1, keep_payloads=keep_payloads)
    trained = NodeFedAvg().fit(grown, cfg, [], seed)
    phi = trained.global_model.eval()
    labels, right, total = [], 0, 0
    with torch.no_grad():
        for c in clients:
            d = c.data
            pseudo = (d.y >= 0) & ~d.train_mask & ~d.val_mask  # own nodes nobody labelled
            y = d.y.clone()
            y[pseudo] = node_logits(phi, d).argmax(1)[pseudo]
            right += int((y[pseudo] == d.y[pseudo]).sum())
            total += int(pseudo.sum())
            labels.append((y, d.train_mask | pseudo))
    return SelfTrained(
        tuple(labels),
        float(trained.utility["val_accuracy"]),
        right / max(total, 1),
        trained.transcript,
    )
