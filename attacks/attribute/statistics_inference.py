"""Hidden node attributes from the per-class statistics clients uploaded (the honest-but-curious
server reading O-pFGL-style uploads).

The server pools every client's class counts and raw-feature means and standard deviations
into one Gaussian naive-Bayes model of the population's classes, and applies it to the node
features it knows (the hidden column blanked). A hidden label is the model's posterior; a
hidden binary feature j is Σ_c P(c | x_{−j}) · μ_{c,j}, the class-conditional rate of j the
uploads state, weighted by how likely each class is for the node (a continuous column is
"above its median": each class's Gaussian mass above the pool's median)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from scipy.stats import norm

from fgl_workbench.adversary.statistics import uploaded_statistics
from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.attacks.attribute.inference import AttributeInferenceConfig
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.opfgl.statistics import pooled_direct
from fgl_workbench.transcript import CLASS_STATISTICS


class StatisticsAttributeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    attribute: str = AttributeInferenceConfig.model_fields["attribute"]
    adversary: Literal["server"] = "server"
    smoothing: float = Field(
        0.05, gt=0.0, description="variance floor, as a share of the largest feature variance"
    )


def class_posterior(
    x: np.ndarray, counts: np.ndarray, mean: np.ndarray, var: np.ndarray, columns: np.ndarray
) -> np.ndarray:
    """P(c | x) under the naive-Bayes model on ``columns``; classes nobody uploaded get 0."""
    present = counts > 0
    xs, mu, v = x[:, columns], mean[present][:, columns], var[present][:, columns]
    log = -0.5 * (((xs[:, None, :] - mu[None]) ** 2) / v[None] + np.log(v[None])).sum(2)
    log += np.log(counts[present] / counts.sum())[None]
    log -= log.max(1, keepdims=True)
    post = np.zeros((x.shape[0], counts.size))
    post[:, present] = np.exp(log) / np.exp(log).sum(1, keepdims=True)
    return post


class StatisticsAttributeInference:
    name = "statistics-attribute-inference"
    family = "attribute"
    threat = ThreatModel(
        sees="every client's uploaded class statistics",
        knows="the nodes' other features, the auxiliary pool",
    )
    Config = StatisticsAttributeConfig

    def run(self, inp: AttackInput, config: StatisticsAttributeConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, ServerView) or knowledge.graph is None:
            raise NotApplicableError("statistics-attribute-inference: needs the server's view")
        senders = sorted({m.sender for m in view.received if m.kind == CLASS_STATISTICS})
        stats = [s for s in (uploaded_statistics(view, k) for k in senders) if s is not None]
        if not stats:
            raise NotApplicableError("no client uploaded class statistics in the clear")
        d = stats[0].num_features  # the raw features' block
        pool = pooled_direct(stats)
        counts, mean, var = pool.counts, pool.means[:, :d], pool.variances[:, :d]
        var = var + config.smoothing * var.max()
        nodes = np.asarray(inp.candidates)
        x = knowledge.graph.x[torch.as_tensor(nodes)].numpy(force=True)
        columns = np.arange(x.shape[1])
        if config.attribute == "label":
            return AttackOutput(class_posterior(x, counts, mean, var, columns))
        j = int(config.attribute.split(":", 1)[1])
        post = class_posterior(x, counts, mean, var, columns[columns != j])
        known = knowledge.graph.x[torch.as_tensor(knowledge.aux_ids), j].numpy(force=True)
        if np.isin(known, (0.0, 1.0)).all():  # a binary column: its class means are rates
            given_class = mean[:, j]
        else:  # above the median (read off the pool), under each class's Gaussian
            cut = np.median(known)
            given_class = norm.sf((cut - mean[:, j]) / np.sqrt(var[:, j]))
        rate = np.clip(post @ given_class, 0.0, 1.0)
        return AttackOutput(np.stack([1.0 - rate, rate], 1))


ATTACKS.register("statistics-attribute-inference")(StatisticsAttributeInference())
