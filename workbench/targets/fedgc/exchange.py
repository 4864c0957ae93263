"""FedGC's one-step neighbour exchange (from FedGCN), as its code simulates it: before anything
else each client receives the features of every node within ``hops`` of its own in the global
graph, and the edges among them, so cross-client edges are no longer lost. What a client
learns this way is other clients' raw features (no labels); the relay is recorded in the
transcript as a server-to-client message."""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph

from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import NodeClient

NO_LABEL = -1  # a received neighbour's label: never sent, never used


def extended_client(dataset: NodeDataset, c: NodeClient, hops: int) -> tuple[NodeClient, Data]:
    """The client's subgraph grown by the ``hops``-hop neighbourhood of its nodes; received
    nodes carry features only and sit in no mask. Returns it and what was received (the
    foreign nodes' global ids and features)."""
    own = c.data.global_id
    if hops == 0:
        return c, Data(global_id=own[:0], x=c.data.x[:0])
    subset, edge_index, _, _ = k_hop_subgraph(
        own, hops, dataset.data.edge_index, relabel_nodes=True, num_nodes=dataset.num_items
    )
    at = torch.searchsorted(subset, own)  # both sorted: the client's nodes among the subset
    foreign = torch.ones(subset.numel(), dtype=torch.bool)
    foreign[at] = False

    def widen(mask: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(subset.numel(), dtype=torch.bool)
        out[at] = mask
        return out

    y = torch.full((subset.numel(),), NO_LABEL, dtype=c.data.y.dtype)
    y[at] = c.data.y
    data = Data(
        x=dataset.data.x[subset],
        edge_index=edge_index,
        y=y,
        train_mask=widen(c.data.train_mask),
        val_mask=widen(c.data.val_mask),
        test_mask=widen(c.data.test_mask),
        global_id=subset,
    )
    received = Data(global_id=subset[foreign], x=dataset.data.x[subset[foreign]])
    return NodeClient(c.client_id, data), received
