"""Property inference against shared graph generators (CeFGC across datasets or domains): a
curious client names the member dataset each received generator was trained on.

In a mixture every member keeps its own label range, so the class list that travels with a
generator already names its dataset (``use_classes``). By default the attack ignores it and
reads the weights alone, as it would against a protocol that hid the classes: a generator
denoises graphs of its own dataset best. For each received package (CeFGC: a generator per
class; CeFGC*: one) and each member dataset, the lowest DSM loss of the package's generators
(at each class's schedule) on reference graphs of that member: the auxiliary pool's graphs of
the member, and the client's own training graphs for its own. The guess is the member with
the lowest loss relative to the generator's other losses and to the other generators' on
the same graphs (log losses centred per generator, then standardised per member over the
received generators and the client's own: generators differ in scale, and some datasets are
harder to denoise for every generator); the scores are a softmax over the negated z-scores.
On MUTAG against IMDB-BINARY it named 3 of 3 generators trained 30 epochs, 2 of 3 at 5."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.generators import generator_recipe, level_losses, opened_payloads
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.cefgc.generator import generator_sources, trainable


class GeneratorSourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["client"] = "client"
    client: int = Field(0, ge=0, description="the curious client")
    draws: int = Field(4, ge=1, le=1000, description="noise draws per level and graph")
    references: int = Field(16, ge=1, description="reference graphs per member dataset")
    use_classes: bool = Field(
        False, description="read the dataset off the class list (exact in a mixture)"
    )


def source_of(graph) -> int:
    return int(getattr(graph, "source", 0))


class GeneratorSourceAttack:
    name = "generator-source"
    family = "source"
    threat = ThreatModel(
        sees="the generators it received, with their class lists",
        knows="the auxiliary pool's graphs of each member dataset, its own graphs",
    )
    Config = GeneratorSourceConfig

    def run(self, inp: AttackInput, config: GeneratorSourceConfig, seed: int) -> AttackOutput:
        cfg = generator_recipe(inp, self.name)
        view = inp.view
        own = trainable(view.local.train, cfg)
        aux = trainable(list(inp.knowledge.aux_graphs), cfg)
        if not own:
            raise NotApplicableError(f"{self.name}: the client holds no graph to compare with")
        features = own[0].x.shape[1]
        packages = opened_payloads(view.received, view.keys, cfg, features, summands=2)
        mine = int(np.bincount([source_of(g) for g in own]).argmax())
        members = max([mine] + [source_of(g) for g in aux]) + 1
        refs = [[g for g in aux if source_of(g) == d][: config.references] for d in range(members)]
        refs[mine] = own[: config.references]
        if config.use_classes:
            scores = np.stack([self.by_classes(p, aux + own, members) for p in packages])
            return AttackOutput(scores, details={"counts": {"packages": len(packages)}})
        mine_up = opened_payloads(view.sent, view.keys, cfg, features, summands=1)
        losses = np.stack(
            [self.losses(p, refs, cfg, features, config.draws, seed) for p in packages + mine_up]
        )
        # a generator's losses differ in scale from another's, and some members' graphs are
        # harder for every generator: log losses are centred per generator (what it fits
        # relatively best), then standardised per member over the generators, own ones
        # included
        seen = np.isfinite(losses).all(0)
        z = np.full(losses.shape, -np.inf)
        col = np.log(losses[:, seen])
        col = col - col.mean(1, keepdims=True)
        z[:, seen] = -(col - col.mean(0)) / (col.std(0) + 1e-12)
        z = z[: len(packages)]
        scores = np.exp(z - z.max(1, keepdims=True))
        scores /= scores.sum(1, keepdims=True)
        return AttackOutput(scores, details={"counts": {"packages": len(packages)}})

    @staticmethod
    def losses(package: dict, refs: list, cfg, features: int, draws: int, seed: int):
        """[members]: the package's lowest mean DSM loss on each member's reference graphs."""
        loss = np.full(len(refs), np.inf)
        for net, _, scale in generator_sources([package], cfg, features):
            for d, graphs in enumerate(refs):
                if graphs:
                    mean = level_losses(net, graphs, cfg, scale, draws, seed).mean()
                    loss[d] = min(loss[d], float(mean))
        return loss

    @staticmethod
    def by_classes(package: dict, graphs: list, members: int) -> np.ndarray:
        """The members whose label ranges hold the package's classes (the public layout of
        the mixture, read off labelled graphs), equally likely."""
        owner = {int(g.y.view(-1)[0]): source_of(g) for g in graphs}
        hits = np.zeros(members)
        for k in package["classes"].tolist():
            if k in owner:
                hits[owner[k]] += 1
        return hits / hits.sum() if hits.any() else np.full(members, 1 / members)


ATTACKS.register("generator-source")(GeneratorSourceAttack())
