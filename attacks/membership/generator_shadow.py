"""Shadow-generator membership inference against shared graph generators (CeFGC; Shokri et
al. 2017 carried over to diffusion models): a curious client trains shadow generators with the
public recipe on half of graphs it holds, so it knows which graphs each shadow trained on, and
learns from their denoising-score-matching losses how membership shows across the noise
levels; then it judges the candidates by their losses under the generators it received.

Features, per candidate: its DSM loss at every noise level (the best-fitting generator of its
class, level by level, for the received ones; the shadow's generator of its class for the
shadow's graphs), as z-scores per level over the graphs scored together (a class's candidates;
a shadow's members and non-members of a class), so a generator's overall fit cancels. A
logistic regression learns the levels' weights, where ``mia-generator-loss`` fixes them.

Shadow data: the auxiliary pool (graphs no client trained on), the curious client's own
training graphs, or both. One difference is left: a candidate's score takes the best of the
N − 1 received generators of its class, a shadow graph's the one shadow generator of it."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field
from sklearn.linear_model import LogisticRegression
from torch_geometric.data import Data

from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.generators import (
    class_losses,
    received_generators,
    scored_by_class,
    scored_levels,
    standardised_levels,
)
from fgl_workbench.attacks.membership.generator_loss import CuriousClientConfig
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.cefgc.generator import (
    GeneratorConfig,
    client_generators,
    generator_sources,
    trainable,
)


class GeneratorShadowConfig(CuriousClientConfig):
    shadows: int = Field(2, ge=1, le=32, description="shadow clients, each on a random half")
    data: Literal["aux", "own", "both"] = Field(
        "both", description="shadow graphs: the auxiliary pool, its own training graphs, or both"
    )
    draws: int = Field(4, ge=1, le=1000, description="noise draws per level and graph")


def shadow_graphs(inp: AttackInput, data: str, cfg: GeneratorConfig) -> list[Data]:
    """The graphs the adversary may train shadows on, each small enough to train on."""
    pool: list[Data] = []
    if data in ("aux", "both"):
        pool += list(inp.knowledge.aux_graphs)
    if data in ("own", "both"):
        pool += list(inp.view.local.train)
    return trainable(pool, cfg)


def halves(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random half of every class (boolean): the shadow's members."""
    inside = np.zeros(labels.size, bool)
    for k in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == k))
        inside[idx[: idx.size // 2]] = True
    return inside


class GeneratorShadowAttack:
    name = "mia-generator-shadow"
    family = "membership"
    threat = ThreatModel(
        sees="the N − 1 generators it received",
        knows="the public generator recipe, the auxiliary pool and its own graphs (shadow data)",
    )
    Config = GeneratorShadowConfig

    def run(self, inp: AttackInput, config: GeneratorShadowConfig, seed: int) -> AttackOutput:
        got = received_generators(inp, config.undo_pairing, config.draws, seed, self.name)
        cfg, draws = got.config, config.draws
        label_channel = bool(inp.knowledge.recipe.config.get("label_channel", False))
        pool = shadow_graphs(inp, config.data, cfg)
        labels = np.array([int(g.y.view(-1)[0]) for g in pool])
        if pool and np.bincount(labels).max() < 4:
            pool = []
        if not pool:
            raise NotApplicableError(
                f"{self.name}: at least 4 shadow graphs of a class (data: {config.data})"
            )
        features = pool[0].x.shape[1]
        used = scored_levels(cfg, config.levels)
        rng = np.random.default_rng(derive_seed(seed, self.name))
        x_rows, y_rows = [], []
        for s in range(config.shadows):
            inside = halves(labels, rng)
            shadow_seed = derive_seed(seed, f"{self.name}/shadow{s}")
            seed_everything(shadow_seed)  # the networks' initial weights
            gen = seeded_generator(shadow_seed)
            members = [g for g, m in zip(pool, inside, strict=True) if m]
            payload = client_generators(members, cfg, label_channel, gen)
            sources = generator_sources([payload], cfg, features)
            for k in np.unique(labels):
                idx = np.flatnonzero(labels == k)
                losses = class_losses(sources, int(k), [pool[i] for i in idx], cfg, draws, seed)
                if losses and idx.size > 1:
                    x_rows.append(standardised_levels(losses[0][used]).T)
                    y_rows.append(inside[idx])
        x, y = np.concatenate(x_rows), np.concatenate(y_rows)
        classifier = LogisticRegression(max_iter=1000).fit(x, y)

        def score(k: int, graphs: list[Data]) -> np.ndarray | None:
            losses = class_losses(got.sources, k, graphs, cfg, draws, seed)
            if not losses or len(graphs) < 2:
                return None if not losses else np.zeros(len(graphs))
            best = np.min(losses, axis=0)
            return classifier.decision_function(standardised_levels(best[used]).T)

        scores = scored_by_class(inp.candidates, cfg, score)
        counts = {
            "generators": len(got.sources),
            "recovered": got.recovered,
            "shadow_graphs": len(pool),
        }
        return AttackOutput(scores, details={"counts": counts, "weights": classifier.coef_[0]})


ATTACKS.register("mia-generator-shadow")(GeneratorShadowAttack())
