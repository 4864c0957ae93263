"""Gradient inversion (DLG, Zhu et al. 2019; iDLG, Zhao et al. 2020; the cosine objective of
Geiping et al. 2020) of one client's FedAvg upload, adapted to a GNN client.

The honest-but-curious server holds the global model it sent client k in a round and the
model k sent back. It invents dummy node features X′ and soft labels Y′, replays k's local
training on them (the recipe's optimiser, learning rate, weight decay and local epochs; one
full-batch step per epoch, as node-level FedAvg trains) and moves X′, Y′ until the replayed
update points the way the observed one does. What it assumes of k's graph is the config's
``structure``: ``known`` (k's edges and which of its nodes are labelled: every node's features
are reconstructed in k's own order, the unlabelled ones in the labelled ones' receptive field
too, so there are more unknowns) or ``none`` (k's labelled nodes as isolated nodes,
reconstructed as an unordered set). Either way it knows k's node counts (the
batch size DLG assumes) and never k's features or labels.

Dropout cannot be replayed (its masks are k's randomness), so the replay runs without it; a
persistent Adam state is unknown to the server, so an Adam recipe is replayed from a fresh
state. Both are mismatches a real server faces too."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.func import functional_call

from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import sealed
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.transcript import MODEL_WEIGHTS, client


class GradientInversionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    client: int = Field(0, ge=0, description="whose upload the server inverts")
    structure: Literal["none", "known"] = Field(
        "none", description="none: labelled nodes as isolated nodes; known: the client's edges"
    )
    round: Literal["first", "last"] = Field(
        "last",
        description="the first or last round whose upload the server kept (the target's "
        "keep_payloads decides which it has)",
    )
    steps: int = Field(2000, ge=1, le=100_000, description="optimisation steps on X′, Y′")
    lr: float = Field(0.03, gt=0.0, description="Adam step size on X′, Y′")
    adversary: Literal["server"] = "server"


def observed_round(view: ServerView, k: int, which: str = "last") -> tuple[dict, dict]:
    """(the global state the server sent client k, the state k sent back) for the first or
    last round in which the server kept both."""
    name = client(k)
    ups = {
        m.round: m
        for m in view.received
        if m.sender == name and m.kind == MODEL_WEIGHTS and m.payload is not None
    }
    downs = {
        m.round: m
        for m in view.sent
        if m.receiver == name and m.kind == MODEL_WEIGHTS and m.payload is not None
    }
    reason = sealed(view.received, name)
    if not ups and reason is not None:
        raise NotApplicableError(f"gradient-inversion: {reason}")
    rounds = sorted(ups.keys() & downs.keys())
    if not rounds:
        raise NotApplicableError(
            f"gradient-inversion: the server kept no round with both the model it sent "
            f"{name} and the weights {name} sent back"
        )
    r = rounds[0] if which == "first" else rounds[-1]
    return downs[r].payload, ups[r].payload


class Replay:
    """k's local training, replayed differentiably from the global state (no dropout)."""

    def __init__(self, model: nn.Module, state: dict, recipe: dict) -> None:
        model.eval()  # dropout off: its masks were k's
        self.model = model
        self.names = [n for n, _ in model.named_parameters()]
        # leaves that require grad: the replay differentiates the loss with respect to them
        self.start = {n: state[n].detach().double().requires_grad_() for n in self.names}
        self.model.double()
        self.epochs = int(recipe.get("local_epochs", 1))
        self.lr = float(recipe.get("lr", 0.01))
        self.wd = float(recipe.get("weight_decay", 0.0))
        self.adam = recipe.get("optimizer", "adam") == "adam"

    def update(
        self,
        x: torch.Tensor | None = None,
        edge_index: torch.Tensor | None = None,
        train: torch.Tensor | None = None,
        soft: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The replayed update on (x, edges, soft labels of the ``train`` rows); with no
        labels, the update weight decay alone makes."""
        params = dict(self.start)
        m = {n: torch.zeros_like(p) for n, p in params.items()}
        v = {n: torch.zeros_like(p) for n, p in params.items()}
        for t in range(1, self.epochs + 1):
            if soft is None:  # no data: the steps weight decay alone takes
                grads = [torch.zeros_like(params[n]) for n in self.names]
            else:
                logits = functional_call(self.model, params, (x, edge_index))[train]
                loss = -(soft * F.log_softmax(logits, 1)).sum(1).mean()
                grads = torch.autograd.grad(
                    loss, [params[n] for n in self.names], create_graph=True
                )
            new = {}
            for n, g in zip(self.names, grads, strict=True):
                g = g + self.wd * params[n]
                if self.adam:  # torch's Adam defaults, from a fresh state
                    m[n] = 0.9 * m[n] + 0.1 * g
                    v[n] = 0.999 * v[n] + 0.001 * g * g
                    step = (m[n] / (1 - 0.9**t)) / (_root(v[n] / (1 - 0.999**t)) + 1e-8)
                else:
                    step = g
                new[n] = params[n] - self.lr * step
            params = new
        return torch.cat([(params[n] - self.start[n]).reshape(-1) for n in self.names])


def _root(v: torch.Tensor) -> torch.Tensor:
    """√v, the same values, with gradient 0 where v = 0 (an Adam moment no data moved): the
    plain root's ∞ there, times the 0 that flows into it, is NaN, which spread through the
    whole replay of an Adam recipe."""
    moved = v > 0
    return torch.where(moved, torch.where(moved, v, torch.ones_like(v)).sqrt(), 0.0)


class GradientInversion:
    name = "gradient-inversion"
    family = "client-data"
    threat = ThreatModel(
        sees="a client's FedAvg update and the global model it was computed from",
        knows=(
            "the client's node and labelled-node counts (optionally its edges), the training recipe"
        ),
    )
    Config = GradientInversionConfig

    def run(self, inp: AttackInput, config: GradientInversionConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, ServerView) or view.level != "node":
            raise NotApplicableError("gradient-inversion: needs the server's view at node level")
        shape = knowledge.client_shape
        if shape is None:
            raise NotApplicableError("gradient-inversion: no client's node counts are known")
        sent, upload = observed_round(view, config.client, config.round)
        model = view.spec.build()
        replay = Replay(model, sent, knowledge.recipe.config)
        # weight decay moves every client's model the same known way; left in, it dominates a
        # converged round's update and hides the data's part from the cosine
        decay = replay.update().detach()
        target = torch.cat(
            [(upload[n].double() - sent[n].double()).reshape(-1) for n in replay.names]
        )
        target = target - decay
        if config.structure == "known":
            n, edge_index = shape.num_nodes, torch.as_tensor(shape.edge_index)
            train = torch.as_tensor(shape.train_mask)
        else:
            n, edge_index = shape.num_train, torch.zeros(2, 0, dtype=torch.long)
            train = torch.ones(n, dtype=torch.bool)
        lo, hi, mean = knowledge.aux_feature_range()
        gen = seeded_generator(seed)
        x = mean + 0.1 * torch.randn(n, mean.numel(), generator=gen, dtype=torch.float64)
        x = x.clamp(lo, hi).requires_grad_(True)
        y = torch.zeros(int(train.sum()), view.num_classes, dtype=torch.float64)
        y = (y + 0.01 * torch.randn(y.shape, generator=gen, dtype=torch.float64)).requires_grad_()
        opt = torch.optim.Adam([x, y], lr=config.lr)
        # step decay at 3/8, 5/8 and 7/8 of the run, as Geiping et al. schedule it
        milestones = [int(config.steps * f) for f in (3 / 8, 5 / 8, 7 / 8)]
        schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma=0.1)
        for _ in range(config.steps):
            opt.zero_grad()
            sim = replay.update(x, edge_index, train, torch.softmax(y, 1))
            loss = 1 - F.cosine_similarity(sim - decay, target, dim=0)
            loss.backward()
            opt.step()
            schedule.step()
            with torch.no_grad():
                x.clamp_(lo, hi)
        rows = x.detach()[train] if config.structure == "known" else x.detach()
        order = "set" if config.structure == "none" else "local"
        return AttackOutput(
            rows.float().numpy(force=True),
            details={
                "labels": y.detach().argmax(1).numpy(force=True),
                "order": order,
                "final_loss": float(loss.detach()),
            },
        )


ATTACKS.register("gradient-inversion")(GradientInversion())
