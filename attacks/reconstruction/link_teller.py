"""LinkTeller (Wu, Yang, Shen, Li and Li, IEEE S&P 2022): influence analysis by an adversary
who can change a node's features, e.g. its own profile, and read the deployments' answers
again. A GNN mixes a node's features into its neighbours' outputs, so raising u's features
moves v's posterior only if v is within the model's reach of u in u's client's private
subgraph; the pair's score is how far v's posterior moves per unit change. Nodes of another
client never move, so cut edges score zero: this adversary sees only what lies inside one
client's graph."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.adversary.candidates import NodePairs
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.errors import NotApplicableError


class LinkTellerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    step: float = Field(1e-2, gt=0.0, le=10.0, description="change added to every feature of u")


class LinkTeller:
    name = "link-teller"
    family = "link"
    threat = ThreatModel(
        sees=(
            "the clients' deployments' posteriors by node id, also after it changes one node's "
            "features (its own profile)"
        ),
        knows="the population's node features",
    )
    Config = LinkTellerConfig

    def run(self, inp: AttackInput, config: LinkTellerConfig, seed: int) -> AttackOutput:
        pairs, api = inp.candidates, getattr(inp.view, "api", None)
        if not isinstance(pairs, NodePairs) or not hasattr(api, "influence"):
            raise NotApplicableError("link-teller needs node pairs and a deployment to probe")
        scores = np.zeros(len(pairs))
        order = np.argsort(pairs.src, kind="stable")
        nodes, starts = np.unique(pairs.src[order], return_index=True)
        for u, mine in zip(nodes.tolist(), np.split(order, starts[1:]), strict=True):
            ids, moved = api.influence(u, config.step)
            dst = pairs.dst[mine]
            inside = np.isin(dst, ids)
            norms = moved.norm(dim=1).numpy(force=True)
            scores[mine[inside]] = norms[np.searchsorted(ids, dst[inside])]
        return AttackOutput(scores, details={"probes": int(nodes.size)})


ATTACKS.register("link-teller")(LinkTeller())
