"""A CE-FedGNN client's view of the graph (Guo et al. 2026, Sec. 3): its own nodes, every edge
touching them, cross-client edges included (both endpoints' clients see such an edge, as both
banks see a transaction), and the far endpoints of those edges as *halo* nodes. A halo node's
features stay with its owner; what the client gets of it is the embedding its owner releases
through the server, so halo rows carry no features and no label."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import degree

from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.partition import ClientPart

NO_LABEL = -1


@dataclass(frozen=True)
class HaloClient:
    client_id: int
    data: Data  # own nodes first, then halo nodes; x zero and y NO_LABEL on halo rows
    num_own: int

    @property
    def num_nodes(self) -> int:
        return int(self.data.num_nodes)

    @property
    def halo(self) -> torch.Tensor:
        """Global ids of the halo nodes, in local order."""
        return self.data.global_id[self.num_own :]

    @cached_property
    def boundary(self) -> torch.Tensor:
        """Local ids of own nodes with at least one halo neighbour: what the client releases."""
        src, dst = self.data.edge_index
        return torch.unique(src[(src < self.num_own) & (dst >= self.num_own)])

    @cached_property
    def degree(self) -> torch.Tensor:
        """Each local node's degree over the client's edges: an own node's whole degree (all
        its edges are here), a halo node's only as far as this client sees it."""
        return degree(self.data.edge_index[1], self.num_nodes).long()


def halo_client(
    dataset: NodeDataset, part: ClientPart, held: np.ndarray | None = None
) -> HaloClient:
    """Client ``part`` with its cross-client edges kept and their far endpoints as halo nodes.
    Edges between two halo nodes are not the client's to see and are left out; so are edges
    to nodes outside the federation (``held``: the nodes some client holds; the auxiliary
    pool's are nobody's, and nobody would ever release their embeddings)."""
    src, dst = dataset.data.edge_index
    owned = torch.zeros(dataset.num_items, dtype=torch.bool)
    own = torch.as_tensor(np.asarray(part.ids, dtype=np.int64))
    owned[own] = True
    touching = owned[src] | owned[dst]
    if held is not None:
        inside = torch.as_tensor(np.asarray(held, dtype=bool))
        touching &= inside[src] & inside[dst]
    src, dst = src[touching], dst[touching]
    far = torch.unique(torch.cat([src[~owned[src]], dst[~owned[dst]]]))
    ids = torch.cat([own, far])
    local = torch.full((dataset.num_items,), -1, dtype=torch.long)
    local[ids] = torch.arange(ids.numel())
    n_own, n = own.numel(), ids.numel()
    x = torch.zeros(n, dataset.num_features, dtype=dataset.data.x.dtype)
    x[:n_own] = dataset.data.x[own]
    y = torch.full((n,), NO_LABEL, dtype=torch.long)
    y[:n_own] = dataset.data.y[own]

    def mask(sub: np.ndarray) -> torch.Tensor:
        m = torch.zeros(n, dtype=torch.bool)
        m[local[torch.as_tensor(np.asarray(sub, dtype=np.int64))]] = True
        return m

    data = Data(
        x=x,
        edge_index=torch.stack([local[src], local[dst]]),
        y=y,
        train_mask=mask(part.train),
        val_mask=mask(part.val),
        test_mask=mask(part.test),
        global_id=ids,
        num_nodes=n,
    )
    return HaloClient(part.client_id, data, n_own)
