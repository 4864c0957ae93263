"""Graph-level partitioners: label-Dirichlet, IID, cross-dataset."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from fgl_workbench.data.datasets import Dataset, GraphDataset
from fgl_workbench.data.node_partitioners import DirichletParams, label_dirichlet
from fgl_workbench.data.partition import PARTITIONERS, PartitionerSpec
from fgl_workbench.errors import PartitionError


class IIDParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def iid(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Uniformly random, near-equal shares."""
    return list(np.array_split(rng.permutation(ids), k))


def cross_dataset(
    dataset: Dataset, ids: np.ndarray, k: int, rng: np.random.Generator, p: BaseModel
) -> list[np.ndarray]:
    """Each source dataset goes to its own group of k / (number of sources) clients (IID inside
    a group), as in the cross-dataset settings of GCFL and CeFGC."""
    assert isinstance(dataset, GraphDataset)
    source = dataset.source[ids]
    groups = np.unique(source)
    if k % groups.size:
        raise PartitionError(
            f"cross-dataset: num_clients={k} must be a multiple of the {groups.size} source "
            f"datasets ({', '.join(dataset.source_names) or dataset.name})"
        )
    per = k // groups.size
    return [share for g in groups for share in iid(dataset, ids[source == g], per, rng, p)]


PARTITIONERS.register("graph-dirichlet")(
    PartitionerSpec("graph-dirichlet", "graph", DirichletParams, label_dirichlet)
)
PARTITIONERS.register("iid")(PartitionerSpec("iid", "graph", IIDParams, iid))
PARTITIONERS.register("cross-dataset")(
    PartitionerSpec("cross-dataset", "graph", IIDParams, cross_dataset)
)
