"""Data extraction from shared graph generators (CeFGC): a curious client samples graphs from
the generators it received and looks for copies of a candidate graph among them.

EDP-GNN makes structure for a given node set (CeFGC's synthetic graphs take node counts and
features from the receiver's graphs), so for each candidate the client samples ``samples``
structures on the candidate's own nodes from every received generator of its class (at its
class's schedule for CeFGC*) and scores the best match: 1 for an isomorphic copy (atoms in
place), else the highest normalised WL-kernel similarity
(``fgl_workbench.attacks.reconstruction.graph_match``). A generator that memorised a graph gives it
back. Scored as membership: the output's threshold marks exact copies, so ``threshold_tpr`` is the
fraction of training graphs reproduced exactly and ``threshold_fpr`` the held-out baseline (graphs
"reproduced" without being trained on: small molecules recur); AUC ranks near-copies too. Graphs
above ``max_nodes`` were never trained on and score 0."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.generators import received_generators
from fgl_workbench.attacks.reconstruction.graph_match import COPY, NEAR_COPY, copy_similarity
from fgl_workbench.device import seeded_generator
from fgl_workbench.targets.cefgc.generator import sample_graphs


class GeneratorSamplingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["client"] = "client"
    client: int = Field(0, ge=0, description="the curious client")
    samples: int = Field(
        8, ge=1, le=10_000, description="graphs sampled per candidate and generator"
    )
    steps: int | None = Field(
        None, ge=1, le=10_000, description="Langevin steps per level (default: the recipe's)"
    )
    wl_iterations: int = Field(3, ge=0, le=10, description="WL relabelling rounds")
    batch: int = Field(256, ge=1, description="graphs sampled at once")
    undo_pairing: bool = Field(True, description="CeFGC+: recover its partners' generators")


class GeneratorSamplingAttack:
    name = "generator-sampling"
    family = "membership"
    threat = ThreatModel(
        sees="the N − 1 generators it received (decrypted with its key under CeFGC+)",
        knows="the public generator recipe, its own generators",
    )
    Config = GeneratorSamplingConfig

    def run(self, inp: AttackInput, config: GeneratorSamplingConfig, seed: int) -> AttackOutput:
        got = received_generators(inp, config.undo_pairing, 4, seed, self.name)
        cfg = got.config
        if config.steps is not None:
            cfg = cfg.model_copy(update={"steps": config.steps})
        cands = inp.candidates
        gen = seeded_generator(seed)
        scores = np.zeros(len(cands.graphs))
        small = np.array([g.num_nodes <= cfg.max_nodes for g in cands.graphs])
        for k in np.unique(cands.labels):
            idx = np.flatnonzero((cands.labels == k) & small)
            # every candidate's node set ``samples`` times, sampled in batches
            templates = [cands.graphs[i] for i in idx for _ in range(config.samples)]
            for net, c, scale in got.sources:
                if c != k or not templates:
                    continue
                made = []
                for start in range(0, len(templates), config.batch):
                    chunk = templates[start : start + config.batch]
                    made += sample_graphs(net, chunk, int(k), cfg, gen, scale)
                for j, i in enumerate(idx):
                    mine = made[j * config.samples : (j + 1) * config.samples]
                    sim = copy_similarity(cands.graphs[i], mine, config.wl_iterations)
                    scores[i] = max(scores[i], sim)
        counts = {
            "generators": len(got.sources),
            "recovered": got.recovered,
            "copies": int((scores == COPY).sum()),
        }
        details = {"counts": counts}
        return AttackOutput(scores, threshold=NEAR_COPY, details=details)


ATTACKS.register("generator-sampling")(GeneratorSamplingAttack())
