"""Inversion of per-class gradient uploads (FedGC's condensation channel): the server drew θ_t
itself, and client k sends it ∇θ of the mean loss over its training nodes of each class c,
with k's class counts n_k(c) sent once. Labels need no inversion at all (every gradient is
one class's, and the counts say how many nodes it averages); features do, and a class a
client holds few nodes of gives a gradient of few nodes: near per-node.

Two methods, both blind to k's graph (its nodes taken as isolated, so the GCN is an MLP):
- ``analytic``: the first layer's gradient of one isolated node is x ⊗ ∂b1 (Phong et al. 2017;
  Geiping et al.'s bias trick), so x̂ = ∂W1 ∂b1 / ‖∂b1‖², the rank-one least-squares fit,
  exact for one isolated node; for n nodes, or nodes whose neighbours enter the gradient, it
  is a blend of their (aggregated) features, given to each of the n rows.
- ``optimise``: DLG with Geiping et al.'s cosine objective: n_k(c) dummy rows, labelled c,
  moved until their gradient points the way the upload does; started from the analytic
  estimate (plus noise, so the rows can separate) and kept in the auxiliary pool's box."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.fedgc.condensation import class_gradients, receptive_field
from fgl_workbench.transcript import CLASS_COUNTS, GRADIENTS, MODEL_WEIGHTS, client


class ClassGradientInversionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    client: int = Field(0, ge=0, description="whose per-class gradients the server inverts")
    round: Literal["first", "last"] = Field(
        "first", description="which kept round's θ_t and gradients (keep_payloads decides)"
    )
    method: Literal["analytic", "optimise"] = "analytic"
    steps: int = Field(300, ge=1, le=100_000, description="optimise: Adam steps per class")
    lr: float = Field(0.01, gt=0.0, description="optimise: Adam step size on the rows")
    adversary: Literal["server"] = "server"


def observed_class_round(view: ServerView, k: int, which: str) -> tuple[list, dict, np.ndarray]:
    """(θ_t the server sent client k, k's per-class gradients of that round, k's class counts)
    for the first or last round in which the server kept both."""
    name = client(k)
    sent = {
        m.round: m.payload
        for m in view.sent
        if m.receiver == name and m.kind == MODEL_WEIGHTS and m.payload is not None
    }
    grads = {
        m.round: m.payload
        for m in view.received
        if m.sender == name and m.kind == GRADIENTS and m.payload is not None
    }
    counts = view.last_payload(name, CLASS_COUNTS)
    rounds = sorted(sent.keys() & grads.keys())
    if not rounds or counts is None:
        raise NotApplicableError(
            f"class-gradient-inversion: the server kept no round with θ_t, {name}'s per-class "
            "gradients and its class counts (the target uploads none, or keep_payloads drops them)"
        )
    r = rounds[0] if which == "first" else rounds[-1]
    return sent[r], grads[r], np.asarray(counts)


def rank_one_rows(grad: list[torch.Tensor]) -> torch.Tensor:
    """x̂ with ∂W1 ≈ x̂ ⊗ ∂b1 in least squares (exact for a single isolated node)."""
    w1, b1 = grad[0].double(), grad[1].double()
    norm = float(b1 @ b1)
    if norm == 0.0:  # no hidden unit active: the gradient says nothing of x
        return torch.zeros(w1.shape[0], dtype=torch.float64)
    return w1 @ b1 / norm


def flat(params: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([p.reshape(-1) for p in params])


class ClassGradientInversion:
    name = "class-gradient-inversion"
    family = "client-data"
    threat = ThreatModel(
        sees=(
            "a client's per-class gradient uploads and class counts, and the weights θ_t it drew "
            "itself"
        ),
        knows="the auxiliary pool's feature range",
    )
    Config = ClassGradientInversionConfig

    def run(
        self, inp: AttackInput, config: ClassGradientInversionConfig, seed: int
    ) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, ServerView) or view.level != "node":
            raise NotApplicableError(
                "class-gradient-inversion: needs the server's view at node level"
            )
        theta, grads, counts = observed_class_round(view, config.client, config.round)
        theta = [p.double() for p in theta]
        lo, hi, _ = knowledge.aux_feature_range()
        gen = seeded_generator(seed)
        rows, labels, sizes, losses = [], [], [], []
        for c in sorted(grads):
            n = int(counts[c])
            estimate = rank_one_rows(grads[c]).clamp(lo, hi)
            x = estimate.repeat(n, 1)
            if config.method == "optimise":
                x, loss = self._optimise(theta, grads[c], x, c, config, lo, hi, gen)
                losses.append(loss)
            rows.append(x)
            labels += [c] * n
            sizes += [n] * n
        details = {
            "labels": np.asarray(labels),
            "order": "set",
            "class_size": np.asarray(sizes),  # how many nodes each row's gradient averaged
        }
        if losses:
            details["final_loss"] = float(np.mean(losses))
        return AttackOutput(torch.cat(rows).float().numpy(force=True), details=details)

    @staticmethod
    def _optimise(theta, grad, start, c, config, lo, hi, gen) -> tuple[torch.Tensor, float]:
        n = start.shape[0]
        noise = 0.1 * (hi - lo) * torch.randn(start.shape, generator=gen, dtype=torch.float64)
        x = (start + (noise if n > 1 else 0.0)).clamp(lo, hi).requires_grad_(True)
        target = flat([g.double() for g in grad])
        adj, y = torch.eye(n, dtype=torch.float64), torch.full((n,), c)
        everyone = torch.ones(n, dtype=torch.bool)
        opt = torch.optim.Adam([x], lr=config.lr)
        loss = torch.zeros(())
        for _ in range(config.steps):
            opt.zero_grad()
            field = receptive_field(x, adj, y, everyone)
            sim = flat(class_gradients(theta, field, create_graph=True)[c])
            loss = 1 - F.cosine_similarity(sim, target, dim=0)
            loss.backward()
            opt.step()
            with torch.no_grad():
                x.clamp_(lo, hi)
        return x.detach(), float(loss.detach())


ATTACKS.register("class-gradient-inversion")(ClassGradientInversion())
