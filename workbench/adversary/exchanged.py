"""Node embeddings the clients exchanged through the server (CE-FedGNN's boundary releases),
as the honest-but-curious server received them: every release of every node, in round order.

This is the paper's threat model: an adversary observing every message between clients, the
released cohort included. It reads a node's last release, or the mean of all of them (R′
releases with fresh noise each: averaging shrinks the noise by √R′, which the accountant's
composition charges for)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import torch

from fgl_workbench.errors import NotApplicableError
from fgl_workbench.transcript import EMBEDDINGS, Message

Combine = Literal["last", "mean"]


@dataclass(frozen=True)
class ExchangedEmbeddings:
    ids: np.ndarray  # [m] the global node id of each release
    h: torch.Tensor  # [m, d] the releases, in the order received
    normalised: bool  # metric-DP releases are L2-normalised before their noise: match unit rows
    combine: Combine = "last"

    def renamed(self, names: np.ndarray) -> ExchangedEmbeddings:
        """The same releases with node i named ``names[i]``."""
        return replace(self, ids=np.asarray(names)[self.ids])

    @property
    def nodes(self) -> np.ndarray:
        """The nodes released at least once (public: the cohort is announced)."""
        return np.unique(self.ids)

    def release_counts(self, node_ids: np.ndarray) -> np.ndarray:
        counts = np.bincount(self.ids, minlength=int(np.max(node_ids, initial=0)) + 1)
        return counts[np.asarray(node_ids)]

    def embeddings(self, node_ids: np.ndarray) -> torch.Tensor:
        """One row per node: its last release, or the mean of its releases."""
        node_ids = np.asarray(node_ids)
        missing = np.setdiff1d(node_ids, self.ids)
        if missing.size:
            raise NotApplicableError(
                f"{missing.size} of the asked nodes were never exchanged (e.g. node {missing[0]})"
            )
        if self.combine == "last":
            last = {int(v): i for i, v in enumerate(self.ids)}  # later releases overwrite
            return self.h[torch.tensor([last[int(v)] for v in node_ids])]
        index = torch.as_tensor(np.searchsorted(self.nodes, self.ids))
        sums = torch.zeros(self.nodes.size, self.h.shape[1], dtype=self.h.dtype)
        sums.index_add_(0, index, self.h)
        mean = sums / torch.bincount(index, minlength=self.nodes.size).unsqueeze(1)
        return mean[torch.as_tensor(np.searchsorted(self.nodes, node_ids))]


def exchanged_embeddings(
    received: tuple[Message, ...], normalised: bool, combine: Combine = "last"
) -> ExchangedEmbeddings:
    """The ``EMBEDDINGS`` payloads among ``received`` (each a dict with ``global_id`` and
    ``h``); NotApplicableError if there are none, or none was kept."""
    kept = [m.payload for m in received if m.kind == EMBEDDINGS and m.payload is not None]
    if not kept:
        raise NotApplicableError("the target exchanges no node embeddings (or kept none)")
    ids = torch.cat([p["global_id"] for p in kept]).numpy(force=True)
    h = torch.cat([p["h"] for p in kept]).float()
    return ExchangedEmbeddings(ids, h, normalised, combine)
