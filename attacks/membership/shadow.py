"""Shadow-model membership inference (Shokri et al. 2017; for GNN nodes, Olatunji et al. 2021).

The adversary trains shadow models with the target's recipe on part of its auxiliary pool
(as many training records as the target had, at most half the pool), so it knows which
records each shadow trained on; an attack classifier learns to tell the shadows' members from
non-members by their sorted posteriors, then judges the target's.

Olatunji et al.'s two node-level settings fix how the shadow is queried:
- ``full``: the shadow trained on a subgraph and is queried on the whole population graph
  (members' neighbourhoods include non-members). Our targets answer queries on the
  population graph, so this is the matched setting.
- ``disjoint``: members are queried inside the subgraph induced by the members, non-members
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

from attacks.adaptive import adaptive_input
from attacks.base import ATTACKS, AttackInput, AttackOutput, Candidates, ThreatModel
from attacks.membership.observe import (
    model_api,
    observed_apis,
    per_model_output,
    query,
)
from attacks.membership.reference import (
    TrainedModelsConfig,
    adversary_recipe,
    induced_subgraph,
    subset,
    trained_models,
    training_fraction,
)
from workbench.errors import NotApplicableError
from workbench.query import NodeQueryAPI
from workbench.seeding import derive_seed


class ShadowConfig(TrainedModelsConfig):
    setting: Literal["full", "disjoint"] = "full"
    num_shadows: int = Field(1, ge=1, le=64)
    hidden: int = Field(64, ge=1, le=1024, description="attack classifier's hidden units")


def sorted_posteriors(logits: torch.Tensor) -> np.ndarray:
    """Class probabilities in decreasing order: label-agnostic attack features."""
    return logits.double().softmax(1).sort(1, descending=True).values.numpy(force=True)


def random_subsets(n_models: int, n_records: int, size: int, seed: int) -> np.ndarray:
    """[n_models, n_records] boolean, each row ``size`` records drawn without replacement."""
    rng = np.random.default_rng(seed)
    return rng.random((n_models, n_records)).argsort(axis=1) < size


class ShadowAttack:
    name = "mia-shadow"
    family = "membership"
    threat = ThreatModel(
        sees="the released model's answers (querier) or every client's uploaded model (server)",
        knows="the auxiliary pool, the training recipe (shadow models), the population graph",
    )
    Config = ShadowConfig

    def run(self, inp: AttackInput, config: ShadowConfig, seed: int) -> AttackOutput:
        inp = adaptive_input(inp, config.features, self.name, seed)
        apis = observed_apis(inp, self.name)
        aux = inp.knowledge.aux
        if aux.ids.size < 4:
            raise NotApplicableError(f"{self.name}: needs an auxiliary pool (aux_fraction > 0)")
        recipe = adversary_recipe(inp.knowledge, config.trained_as)
        size = max(1, round(aux.ids.size * training_fraction(recipe, aux.ids.size)))
        inclusion = random_subsets(config.num_shadows, aux.ids.size, size, derive_seed(seed, "in"))
        shadows = trained_models(inp, "shadow", aux, inclusion, config.trained_as)
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

        def member_probability(api) -> np.ndarray:
            feats = sorted_posteriors(query(api, inp.candidates, config.hops))
            return clf.predict_proba(feats)[:, 1]

        per_model = {name: member_probability(api) for name, api in apis.items()}
        return per_model_output(per_model, threshold=0.5)

    @staticmethod
    def _shadow_logits(
        inp: AttackInput, model: nn.Module, part: Candidates, config: ShadowConfig
    ) -> torch.Tensor:
        if config.setting == "full" or part.level == "graph":
            return query(model_api(model, inp.knowledge), part, config.hops)
        own = induced_subgraph(inp.knowledge.graph, part.ids)
        return NodeQueryAPI(model, own).logits(np.arange(part.ids.size), config.hops)


ATTACKS.register("mia-shadow")(ShadowAttack())
