"""A client's training data from the per-class statistics it uploaded (the honest-but-curious
server reading an O-pFGL-style upload: each class's count, mean and standard deviation of
the propagated features).

The reconstruction of client k's labelled nodes: for each uploaded class c, n_{k,c} rows of
the raw-feature block of the class mean μ_{k,c} (clipped to the feature range the auxiliary
pool shows), labelled c. A class uploaded from one node is that node exactly; from n nodes,
every member is as close to μ as the class is tight. The label multiset is exact whenever
every class was uploaded. The server knows the client's labelled-node count (the batch size
DLG assumes too): rows the upload does not cover are the auxiliary mean with the pool's
commonest label, its best guess without it; counts that exceed it (pseudo-labelled nodes)
are thinned evenly across classes."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.adversary.statistics import uploaded_statistics
from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.metrics import value_fractions
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.transcript import client


class StatisticsInversionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    client: int = Field(0, ge=0, description="whose upload the server reads")
    adversary: Literal["server"] = "server"


class StatisticsInversion:
    name = "statistics-inversion"
    family = "client-data"
    threat = ThreatModel(
        sees="a client's uploaded class statistics (counts, means, standard deviations)",
        knows="the client's labelled-node count, the auxiliary pool's feature range",
    )
    Config = StatisticsInversionConfig

    def run(self, inp: AttackInput, config: StatisticsInversionConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, ServerView) or knowledge.client_shape is None:
            raise NotApplicableError("statistics-inversion: needs the server's view at node level")
        stats = uploaded_statistics(view, client(config.client))
        if stats is None:
            raise NotApplicableError(
                f"statistics-inversion: client {config.client} uploaded no class statistics"
            )
        lo, hi, mean = (t.numpy(force=True) for t in knowledge.aux_feature_range())
        d = stats.num_features
        rows = [np.clip(stats.means[c, :d], lo, hi) for c in range(stats.counts.size)]
        labels = np.repeat(np.arange(stats.counts.size), stats.counts)
        x = np.stack([rows[c] for c in labels]) if labels.size else np.zeros((0, d))
        n = knowledge.client_shape.num_train
        if labels.size > n:  # pseudo-labelled nodes counted too: keep every class's share
            keep = np.linspace(0, labels.size - 1, n).round().astype(int)
            x, labels = x[keep], labels[keep]
        guess = value_fractions(knowledge.aux_labels, stats.counts.size).argmax()
        missing = n - labels.size
        x = np.vstack([x, np.tile(mean, (missing, 1))])
        labels = np.concatenate([labels, np.full(missing, guess)])
        return AttackOutput(x, details={"labels": labels, "order": "set"})


ATTACKS.register("statistics-inversion")(StatisticsInversion())
