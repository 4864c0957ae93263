"""Graph reconstruction from node embeddings: which pairs of nodes are linked, read from the
embeddings a deployment answers with (``source: served``, computed on each client's private
subgraph) or from what the querier gets (``source: release``: a published table such as
metric-DP's, or a released model's 0-hop embeddings, which see no edge).

``decoder: inner-product`` scores a pair by z_u·z_v (a graph auto-encoder's decoder, untrained:
message passing makes neighbours' embeddings align). ``decoder: trained`` fits a logistic
regression on the element-wise product z_u ⊙ z_v (a diagonal bilinear decoder, GAE-style)
using the pairs the adversary knows to be linked or not."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fgl_workbench.adversary.candidates import NodePairs
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.reconstruction.link_stealing import known_pairs
from fgl_workbench.errors import NotApplicableError


class GraphReconstructionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    source: Literal["served", "release"] = "served"
    decoder: Literal["inner-product", "trained"] = "inner-product"


class GraphReconstruction:
    name = "graph-reconstruction"
    family = "link"
    threat = ThreatModel(
        sees="node embeddings served by the clients or published",
        knows="a known share of edges and non-edges (for the trained decoder)",
    )
    Config = GraphReconstructionConfig

    def run(self, inp: AttackInput, config: GraphReconstructionConfig, seed: int) -> AttackOutput:
        pairs = inp.candidates
        api = getattr(inp.view, "api", None)
        if not isinstance(pairs, NodePairs) or not hasattr(api, "embeddings"):
            raise NotApplicableError("graph reconstruction needs node pairs and embeddings")
        (src, dst), truth = known_pairs(inp.knowledge)
        nodes = np.unique(np.concatenate([pairs.src, pairs.dst, src, dst]))
        rows = api.embeddings(nodes).float().numpy(force=True)
        z = np.zeros((inp.knowledge.graph.num_nodes, rows.shape[1]))
        z[nodes] = rows
        if config.decoder == "inner-product":
            return AttackOutput((z[pairs.src] * z[pairs.dst]).sum(1))
        if truth.all() or not truth.any():
            raise NotApplicableError("a trained decoder needs known edges and non-edges")
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        clf.fit(z[src] * z[dst], truth)
        return AttackOutput(clf.predict_proba(z[pairs.src] * z[pairs.dst])[:, 1])


ATTACKS.register("graph-reconstruction")(GraphReconstruction())
