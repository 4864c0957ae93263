"""Feature inversion from released node embeddings (CE-FedGNN's attribute-inference attack,
its Eq. 32): x̂ = argmin_x′ ‖h(x′; B ∪ {x}) − h(x; B ∪ {x})‖², by gradient descent through
the released model.

The adversary is a member of the federation: it holds the released model (white box) and
reads the target nodes' embeddings where the target gives them out (``source``: the clients'
deployments, or the release: a metric-DP table or the released model's answers). It knows
the other nodes' features and a share of the edges (B), not the target nodes' features. A
metric-DP release is L2-normalised before its noise is added, so against one the adversary
matches normalised embeddings. ``source: exchanged`` is the paper's own setting: the server
inverts the boundary embeddings clients exchanged through it (each node's last release, or
the mean of its releases, which averages their noise away).
``method: nearest-neighbour`` is the baseline that inverts nothing: each target gets the
features of the auxiliary node whose embedding (computed by the adversary with the released
model on what it knows) lies nearest the target's."""

from __future__ import annotations

import copy
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from sklearn.neighbors import NearestNeighbors

from fgl_workbench.adversary.exchanged import Combine, ExchangedEmbeddings
from fgl_workbench.adversary.threat import InsiderView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.defenses.metric_dp import EmbeddingRelease, normalise
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.query import ServedAPI


class FeatureInversionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    source: Literal["served", "release", "exchanged"] = Field(
        "release",
        description="served: the clients' deployments; release: the published embeddings or "
        "the released model's; exchanged: the embeddings clients exchanged through the "
        "server (CE-FedGNN's boundary releases), as the server saw them",
    )
    combine: Combine = Field(
        "last", description="exchanged: a node's last release, or the mean of its releases"
    )
    method: Literal["optimise", "nearest-neighbour"] = "optimise"
    known_edges: float = Field(0.5, ge=0.0, le=1.0, description="share of edges B known")
    hops: int = Field(2, ge=0, le=4, description="neighbourhood of a release query")
    steps: int = Field(500, ge=1, le=100_000)
    lr: float = Field(0.03, gt=0.0, description="Adam step size on x′")


def released_embeddings(view: InsiderView, nodes: np.ndarray, hops: int) -> torch.Tensor:
    api = view.api
    if not hasattr(api, "embeddings"):
        raise NotApplicableError("feature-inversion: the target gives out no node embeddings")
    if isinstance(api, EmbeddingRelease | ServedAPI | ExchangedEmbeddings):
        return api.embeddings(nodes).double()
    return api.embeddings(nodes, hops).double()


class FeatureInversion:
    name = "feature-inversion"
    family = "feature"
    threat = ThreatModel(
        sees="node embeddings served, published or exchanged, and the released model (white box)",
        knows="the other nodes' features and a share of the edges",
    )
    Config = FeatureInversionConfig

    def run(self, inp: AttackInput, config: FeatureInversionConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, InsiderView) or knowledge.graph is None:
            raise NotApplicableError("feature-inversion: needs the released model at node level")
        nodes = np.asarray(inp.candidates)
        target = released_embeddings(view, nodes, config.hops)
        unit = getattr(view.api, "normalised", False)  # metric-DP releases unit-norm rows
        model = copy.deepcopy(view.model).double()
        x, edges = knowledge.graph.x.double(), knowledge.graph.edge_index
        if config.method == "nearest-neighbour":
            with torch.no_grad():
                pool = model.embed(x, edges)[torch.as_tensor(knowledge.aux_ids)]
            pool = normalise(pool) if unit else pool
            found = (
                NearestNeighbors(n_neighbors=1)
                .fit(pool.numpy(force=True))
                .kneighbors(target.numpy(force=True))
            )
            return AttackOutput(
                x[torch.as_tensor(knowledge.aux_ids[found[1][:, 0]])].numpy(force=True)
            )
        lo, hi, mean = knowledge.aux_feature_range()
        index = torch.as_tensor(nodes)
        gen = seeded_generator(seed)
        guess = mean + 0.01 * torch.randn(nodes.size, mean.numel(), generator=gen, dtype=x.dtype)
        guess = guess.clamp(lo, hi).requires_grad_(True)
        opt = torch.optim.Adam([guess], lr=config.lr)
        for _ in range(config.steps):
            opt.zero_grad()
            h = model.embed(x.index_put((index,), guess), edges)[index]
            h = normalise(h) if unit else h
            loss = ((h - target) ** 2).sum(1).mean()
            loss.backward()
            opt.step()
            with torch.no_grad():
                guess.clamp_(lo, hi)
        return AttackOutput(
            guess.detach().float().numpy(force=True), details={"loss": float(loss.detach())}
        )


ATTACKS.register("feature-inversion")(FeatureInversion())
