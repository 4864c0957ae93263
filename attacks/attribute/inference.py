"""Hidden node attributes from what the target releases (the external querier).

The adversary knows the attribute on its auxiliary pool (the label, or a feature column it
alone was given there) and nothing of it on the clients' nodes. It queries the release for
both, trains a logistic regression from the release's answer to the attribute on the pool,
and applies it to the clients' nodes. ``signal``: the posteriors (at ``hops``), the released
node embeddings (metric-DP's table, or the model's penultimate layer where the API gives it),
or, as the target-independent baseline, the node features the adversary already holds (the
hidden column blanked): whatever the release adds over that is what it leaks.
``source: exchanged``: the server reads the embeddings clients exchanged through it
(CE-FedGNN); its own pool was never exchanged, so there it computes the released model's
hidden layer itself, on what it knows."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fgl_workbench.adversary.exchanged import ExchangedEmbeddings
from fgl_workbench.adversary.threat import BackgroundKnowledge, InsiderView, QuerierView
from fgl_workbench.attacks.attributes import EMPTY_POOL, attribute_values
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.defenses.metric_dp import normalise
from fgl_workbench.errors import NotApplicableError


class AttributeInferenceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    attribute: str = Field(
        "label", pattern=r"^(label|feature:\d+)$", description="'label' or 'feature:J'"
    )
    signal: Literal["posterior", "embedding", "features"] = "posterior"
    source: Literal["release", "exchanged"] = Field(
        "release",
        description="release: the querier's answers; exchanged: the embeddings clients "
        "exchanged through the server (CE-FedGNN), as the server saw them (signal: embedding)",
    )
    hops: int = Field(2, ge=0, le=4)
    adversary: Literal["querier"] = "querier"

    @model_validator(mode="after")
    def _exchanged_are_embeddings(self) -> AttributeInferenceConfig:
        if self.source == "exchanged" and self.signal == "posterior":
            raise ValueError("signal: source 'exchanged' carries embeddings, not posteriors")
        return self


def known_values(knowledge: BackgroundKnowledge, attribute: str) -> np.ndarray:
    """The attribute on the auxiliary pool, where the adversary knows it."""
    if attribute == "label":
        return knowledge.aux_labels
    column = int(attribute.split(":", 1)[1])
    pool = knowledge.aux_ids
    return attribute_values(knowledge.graph.x[:, column].numpy(force=True), pool)[pool]


class AttributeInference:
    name = "attribute-inference"
    family = "attribute"
    threat = ThreatModel(
        sees="the released model's posteriors or embeddings, or the embeddings clients exchanged",
        knows="the hidden attribute on the auxiliary pool only, every other feature",
    )
    Config = AttributeInferenceConfig

    def run(self, inp: AttackInput, config: AttributeInferenceConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, QuerierView | InsiderView) or knowledge.graph is None:
            raise NotApplicableError("attribute-inference: needs the querier's view at node level")
        nodes = np.asarray(inp.candidates)
        aux = knowledge.aux_ids
        values = known_values(knowledge, config.attribute)
        count = view.num_classes if config.attribute == "label" else 2
        if not values.size:
            raise NotApplicableError(EMPTY_POOL)
        if np.unique(values).size < 2:
            raise NotApplicableError("the auxiliary pool shows only one value of the attribute")
        train = self._signal(view, knowledge, aux, config)
        test = self._signal(view, knowledge, nodes, config)
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
        clf.fit(train, values)
        probs = np.zeros((nodes.size, count))
        probs[:, clf.classes_] = clf.predict_proba(test)
        return AttackOutput(probs, details={"trained_on": int(aux.size)})

    @staticmethod
    def _signal(
        view: QuerierView | InsiderView,
        knowledge: BackgroundKnowledge,
        ids: np.ndarray,
        config: AttributeInferenceConfig,
    ) -> np.ndarray:
        if config.signal == "features":
            return knowledge.graph.x[torch.as_tensor(ids)].numpy(force=True)
        api = view.api
        if isinstance(api, ExchangedEmbeddings):
            return exchanged_signal(view, api, knowledge, ids)
        if config.signal == "embedding":
            if not hasattr(api, "embeddings"):
                raise NotApplicableError("the target's release gives no node embeddings")
            return api.embeddings(ids, config.hops).float().numpy(force=True)
        if not hasattr(api, "logits"):
            raise NotApplicableError("the target's release gives no posteriors")
        return torch.softmax(api.logits(ids, config.hops).float(), dim=1).numpy(force=True)


def exchanged_signal(
    view: InsiderView, api: ExchangedEmbeddings, knowledge: BackgroundKnowledge, ids: np.ndarray
) -> np.ndarray:
    """Exchanged embeddings where the server saw them; for its own pool (never exchanged),
    the released model's hidden layer on what it knows, normalised as the releases are."""
    exchanged = np.isin(ids, api.nodes)
    if exchanged.all():
        return api.embeddings(ids).numpy(force=True)
    with torch.no_grad():
        own = view.model.embed(knowledge.graph.x, knowledge.graph.edge_index)
    own = normalise(own) if api.normalised else own
    rows = own[torch.as_tensor(ids)].clone()
    if exchanged.any():
        rows[torch.as_tensor(exchanged)] = api.embeddings(ids[exchanged])
    return rows.numpy(force=True)


ATTACKS.register("attribute-inference")(AttributeInference())
