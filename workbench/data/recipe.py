"""How a federation was cut, as plain data: the dataset's name and parameters, the
partition's settings and its seed. A machine holding the dataset rebuilds any client's share
from it alone; a Flower SuperNode of the ``flower`` target's deployment backend rebuilds its
own (``fgl_workbench.targets.flower.deployed``), as a real client holds only its data."""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict
from torch_geometric.data import Data

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.datasets import Dataset
from fgl_workbench.data.federation import (
    Federation,
    GraphClient,
    NodeClient,
    build_federation,
    local_client,
)
from fgl_workbench.data.partition import Membership, Partition, make_partition


class FederationRecipe(BaseModel):
    """``make_partition``'s arguments beside the dataset's: the federation, rebuildable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    dataset: str
    dataset_params: dict[str, Any] = {}
    method: str
    num_clients: int
    seed: int
    params: dict[str, Any] = {}
    split: tuple[float, float, float] | Literal["public"] | None = None
    aux_fraction: float = 0.0
    membership: Membership = "transductive"

    def partition(self, dataset: Dataset) -> Partition:
        return make_partition(
            dataset,
            self.method,
            self.num_clients,
            self.seed,
            params=self.params,
            split=self.split,
            aux_fraction=self.aux_fraction,
            membership=self.membership,
        )

    def build(self, root: str | None = None) -> Federation:
        """The whole federation, the dataset read from ``root`` (else ``$FGLWB_DATA``)."""
        dataset = load_dataset(self.dataset, self.dataset_params, root)
        return build_federation(dataset, self.partition(dataset), self)

    def client(self, k: int, root: str | None = None) -> NodeClient | GraphClient:
        """Client k's local data alone (the partition needs the population to cut it)."""
        dataset = load_dataset(self.dataset, self.dataset_params, root)
        return local_client(dataset, self.partition(dataset), k)


def client_digest(c: NodeClient | GraphClient) -> str:
    """SHA-256 of a client's local data (every tensor of its graphs, in order): two machines
    that rebuilt the same client agree on it, one that read other data or cut it otherwise
    does not."""
    h = hashlib.sha256()
    graphs = [c.data] if isinstance(c, NodeClient) else [*c.train, *c.val, *c.test]
    for g in graphs:
        _digest_graph(h, g)
    return h.hexdigest()


def _digest_graph(h: Any, g: Data) -> None:
    for key in sorted(g.keys()):
        value = g[key]
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"{key}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes())
