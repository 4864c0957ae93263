"""A client's label distribution read straight off a per-class quantity it uploaded (the
honest-but-curious server): O-pFGL-style class statistics and FedGC's class counts carry each
class's count, FedTAD's class-wise reliability vector is a sum over each class's labelled
nodes (so, normalised, close to the label histogram). No simulation is needed: the upload is
the histogram, up to the classes it withholds and the weighting of each count. Clients that
uploaded nothing get the auxiliary prior."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.adversary.statistics import uploaded_statistics
from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.metrics import value_fractions
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.transcript import CLASS_COUNTS, RELIABILITY, client


class UploadedDistributionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    reads: Literal["class-counts", "reliability"] = Field(
        "class-counts", description="class statistics' counts, or a reliability vector"
    )
    adversary: Literal["server"] = "server"


def uploaded_vector(view: ServerView, sender: str, reads: str) -> np.ndarray | None:
    """The per-class vector ``sender`` last uploaded in the clear, if any."""
    if reads == "class-counts":  # full class statistics (O-pFGL) or bare counts (FedGC)
        stats = uploaded_statistics(view, sender)
        if stats is not None:
            return stats.counts.astype(float)
        counts = view.last_payload(sender, CLASS_COUNTS)
        return None if counts is None else torch.as_tensor(counts).double().numpy(force=True)
    vector = view.last_payload(sender, RELIABILITY)
    return None if vector is None else torch.as_tensor(vector).double().numpy(force=True)


class UploadedDistribution:
    name = "uploaded-label-distribution"
    family = "distribution"
    threat = ThreatModel(
        sees="every client's uploaded class counts or reliability vector",
        knows="the auxiliary pool's label prior (for clients that uploaded nothing)",
    )
    Config = UploadedDistributionConfig

    def run(self, inp: AttackInput, config: UploadedDistributionConfig, seed: int) -> AttackOutput:
        view = inp.view
        if not isinstance(view, ServerView):
            raise NotApplicableError("uploaded-label-distribution: needs the server's view")
        clients = np.asarray(inp.candidates)
        vectors = {k: uploaded_vector(view, client(k), config.reads) for k in clients.tolist()}
        if all(v is None for v in vectors.values()):
            raise NotApplicableError(
                f"uploaded-label-distribution: no client uploaded {config.reads} in the clear"
            )
        prior = value_fractions(inp.knowledge.aux_labels, view.num_classes)
        out = np.tile(prior, (clients.size, 1))
        for i, k in enumerate(clients.tolist()):
            v = vectors[k]
            if v is not None and np.clip(v, 0, None).sum() > 0:
                out[i] = np.clip(v, 0, None) / np.clip(v, 0, None).sum()
        return AttackOutput(out)


ATTACKS.register("uploaded-label-distribution")(UploadedDistribution())
