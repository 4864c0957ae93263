"""Membership tracing from released class means (Homer et al. 2008; Dwork et al. 2015's
tracing attacks on means), against O-pFGL's statistics.

A released mean μ_c of class c leans toward each of its members. The adversary knows a
candidate node's features and label, and a reference mean μ_ref,c from its auxiliary pool of
the same class; it scores the candidate by how far it lies along the direction the release
moved away from the reference: ⟨f_v − μ_ref,c, μ_c − μ_ref,c⟩ / ‖μ_c − μ_ref,c‖. With several
releases of the class (the server reading every client's upload), the largest score counts
and each client's release is scored on its own too.

What each adversary reads:
- the server, in the clear: every client's (n, μ, σ) per class;
- the server, under pairwise masks: the pooled sums it decodes (what the protocol reveals);
- a client: the surrogate graph it downloaded (the mean of each class's surrogate rows,
  raw-feature block), or, under CKKS, the pooled sums it decrypts.
Under CKKS the server holds only ciphertexts: not applicable.

``block``: ``raw`` compares raw features; ``propagated`` compares [x ‖ Âx ‖ …] computed on
the population graph the adversary knows (the client propagated over its own subgraph, so
this is an approximation) with the released full rows."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.adversary.threat import ClientView, ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import per_model_output
from fgl_workbench.defenses.masked_aggregation import MaskedAggConfig, server_sum
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.class_statistics import ClassStatistics, propagate
from fgl_workbench.targets.opfgl.statistics import Sums
from fgl_workbench.targets.opfgl.surrogate import SurrogateGraph
from fgl_workbench.transcript import (
    CIPHERTEXT,
    CLASS_STATISTICS,
    MASKED_STATISTICS,
    SURROGATE_GRAPH,
)

Releases = dict[str, tuple[np.ndarray, np.ndarray]]  # name → (classes released [C], means)


class StatisticsTracingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["server", "client"] = "server"
    client: int = Field(0, ge=0, description="the curious client (adversary: client)")
    block: Literal["raw", "propagated"] = Field(
        "raw", description="compare raw features, or the propagated rows"
    )


def server_releases(view: ServerView, recipe, num_classes: int) -> Releases:
    """Every client's uploaded class means (in the clear), or the pooled means the server
    decodes from the masked uploads."""
    received = [m for m in view.received if m.payload is not None]
    clear = {m.sender: m.payload for m in received if m.kind == CLASS_STATISTICS}
    if clear:
        out = {}
        for sender, payload in sorted(clear.items()):
            stats = ClassStatistics.from_payload(payload)
            out[sender] = (stats.counts > 0, stats.means)
        return out
    cfg = next(
        (d.config for d in recipe.defenses if d.name == "masked-aggregation"),
        MaskedAggConfig(),
    )
    total = server_sum(received, cfg, MASKED_STATISTICS)
    if total is not None:
        return {"aggregate": pooled_means(total, num_classes)}
    if any(m.kind == CIPHERTEXT for m in view.received):
        raise NotApplicableError("encrypted (secure aggregation: the server sees only sums)")
    raise NotApplicableError("the server received no class statistics")


def pooled_means(total: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The pooled class means from a summed statistics vector (sums, then original counts)."""
    sums = Sums.from_flat(total[:-num_classes], num_classes)
    present = sums.s0 > 0.5
    return present, sums.s1 / np.where(present, sums.s0, 1.0)[:, None]


def client_releases(view: ClientView, recipe, num_classes: int, features: int) -> Releases:
    """What a client downloaded: the surrogate graph's class means (raw block), or, under
    CKKS, the pooled statistics it decrypts with its key. Only O-pFGL's aggregates are class
    statistics: FedAvg's clients hold the key too, but theirs decrypt to model weights."""
    for m in view.received:
        if m.kind == SURROGATE_GRAPH and m.payload is not None:
            g = SurrogateGraph.from_payload(m.payload)
            means = np.zeros((num_classes, features))
            present = np.zeros(num_classes, bool)
            for c in g.y.unique().tolist():
                means[c], present[c] = g.x[g.y == c].double().mean(0).numpy(force=True), True
            return {"surrogate": (present, means)}
        if (
            m.kind == CIPHERTEXT
            and m.payload is not None
            and view.keys is not None
            and recipe.target == "opfgl"
        ):
            return {"aggregate": pooled_means(view.keys.decrypt(m.payload), num_classes)}
    raise NotApplicableError("the client downloaded no surrogate graph or pooled statistics")


class StatisticsTracing:
    name = "mia-statistics-tracing"
    family = "membership"
    threat = ThreatModel(
        sees=(
            "every client's class statistics or the masked aggregate (server); the surrogate graph "
            "or the decrypted aggregate (client)"
        ),
        knows=(
            "the candidates' features and labels, the auxiliary pool (reference means), the "
            "population graph"
        ),
    )
    Config = StatisticsTracingConfig

    def run(self, inp: AttackInput, config: StatisticsTracingConfig, seed: int) -> AttackOutput:
        view, knowledge, cands = inp.view, inp.knowledge, inp.candidates
        if knowledge.graph is None:
            raise NotApplicableError(f"{self.name}: node-level candidates")
        x = knowledge.graph.x.double()
        if config.block == "propagated":
            hops = int(knowledge.recipe.config.get("hops", 1))
            x = propagate(x, knowledge.graph.edge_index, hops)
        f = x.numpy(force=True)
        num_classes = view.num_classes
        if isinstance(view, ServerView):
            releases = server_releases(view, knowledge.recipe, num_classes)
        elif isinstance(view, ClientView):
            releases = client_releases(
                view, knowledge.recipe, num_classes, knowledge.graph.x.shape[1]
            )
        else:
            raise NotApplicableError(f"{self.name}: the server's or a client's view")
        width = min(f.shape[1], *(m.shape[1] for _, m in releases.values()))
        if config.block == "propagated" and width < f.shape[1]:
            raise NotApplicableError(f"{self.name}: the release has the raw block only")
        f = f[:, :width]
        aux, aux_labels = knowledge.aux_ids, knowledge.aux_labels
        if aux.size == 0:
            raise NotApplicableError(f"{self.name}: an auxiliary pool for the reference means")
        overall = f[aux].mean(0)
        reference = np.stack(
            [
                f[aux[aux_labels == c]].mean(0) if (aux_labels == c).any() else overall
                for c in range(num_classes)
            ]
        )
        rows, labels = f[np.asarray(cands.ids)], np.asarray(cands.labels)
        per_model = {}
        for name, (present, means) in releases.items():
            direction = means[:, :width] - reference
            norm = np.linalg.norm(direction, axis=1)
            norm[norm == 0] = 1.0
            score = ((rows - reference[labels]) * direction[labels]).sum(1) / norm[labels]
            per_model[name] = np.where(present[labels], score, -np.inf)
        out = per_model_output(per_model)
        finite = np.isfinite(out.scores)
        floor = out.scores[finite].min() - 1.0 if finite.any() else 0.0
        details = {**out.details, "counts": {"releases": len(releases)}}
        if "per_model" in details:
            details["per_model"] = {
                k: np.where(np.isfinite(v), v, floor) for k, v in details["per_model"].items()
            }
        return AttackOutput(np.where(finite, out.scores, floor), details=details)


ATTACKS.register("mia-statistics-tracing")(StatisticsTracing())
