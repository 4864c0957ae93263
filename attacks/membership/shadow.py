"""Shadow-model membership inference (Shokri et al. 2017; for GNN nodes, Olatunji et al. 2021).

The adversary trains shadow models of the target's architecture on half of its auxiliary
pool, so it knows which records each shadow trained on; an attack classifier learns to tell
the shadows' members from non-members by their sorted posteriors, then judges the target's.

Olatunji et al.'s two node-level settings fix how the shadow is queried:
- ``full``: trained on the subgraph induced by its members, queried on the whole population
  graph (members' neighbourhoods include non-members). Our targets answer queries on the
  population graph, so this is the matched setting.
- ``disjoint``: members queried inside the subgraph induced by the members, non-members
  inside the one induced by the non-members (train and test graphs disjoint). Against a
  target queried on the population graph it measures how far a mismatched shadow transfers.
Graph-level records are whole graphs, so the setting does not apply there."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field
from sklearn.neural_network import MLPClassifier
from torch import nn

from attacks.base import ATTACKS, AttackInput, AttackOutput, Candidates
from attacks.membership.observe import (
    QueryConfig,
    model_api,
    observed_apis,
    per_model_output,
    query,
)
from attacks.membership.reference import induced_training_graph, subset, trained_models
from workbench.errors import NotApplicableError
from workbench.query import NodeQueryAPI
from workbench.seeding import derive_seed


class ShadowConfig(QueryConfig):
    setting: Literal["full", "disjoint"] = "full"
    num_shadows: int = Field(1, ge=1, le=64)
    epochs: int | None = Field(None, ge=1, description="default: the target's recipe")
    hidden: int = Field(64, ge=1, le=1024, description="attack classifier's hidden units")


def sorted_posteriors(logits: torch.Tensor) -> np.ndarray:
    """Class probabilities in decreasing order: label-agnostic attack features."""
    return logits.double().softmax(1).sort(1, descending=True).values.numpy()


def random_halves(n_models: int, n_records: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.zeros((n_models, n_records), dtype=bool)
    for row in rows:
        row[rng.permutation(n_records)[: n_records // 2]] = True
    return rows


class ShadowAttack:
    name = "mia-shadow"
    family = "membership"
    Config = ShadowConfig

    def run(self, inp: AttackInput, config: ShadowConfig, seed: int) -> AttackOutput:
        apis = observed_apis(inp, self.name)
        aux = inp.knowledge.aux
        if aux.ids.size < 4:
            raise NotApplicableError(f"{self.name}: needs an auxiliary pool (aux_fraction > 0)")
        inclusion = random_halves(config.num_shadows, aux.ids.size, derive_seed(seed, "halves"))
        shadows = trained_models(inp, "shadow", aux, inclusion, config.epochs)
        feats, labels = [], []
        for model, row in zip(shadows, inclusion, strict=True):
            for members, flag in ((row, 1), (~row, 0)):
                part = subset(aux, members)
                feats.append(sorted_posteriors(self._shadow_logits(inp, model, part, config)))
                labels.append(np.full(part.ids.size, flag))
        clf = MLPClassifier(
            (config.hidden,), max_iter=500, early_stopping=True, random_state=seed % 2**32
        )
        clf.fit(np.concatenate(feats), np.concatenate(labels))
        per_model = {
            name: clf.predict_proba(sorted_posteriors(query(api, inp.candidates, config.hops)))[
                :, 1
            ]
            for name, api in apis.items()
        }
        return per_model_output(per_model, threshold=0.5)

    @staticmethod
    def _shadow_logits(
        inp: AttackInput, model: nn.Module, part: Candidates, config: ShadowConfig
    ) -> torch.Tensor:
        if config.setting == "full" or part.level == "graph":
            return query(model_api(model, inp.knowledge), part, config.hops)
        own = induced_training_graph(inp.knowledge.graph, part.ids, part.labels)
        return NodeQueryAPI(model, own).logits(np.arange(part.ids.size), config.hops)


ATTACKS.register("mia-shadow")(ShadowAttack())
