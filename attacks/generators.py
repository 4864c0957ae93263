"""What a curious client makes of the graph generators it received (CeFGC): the packages
opened (decrypted with its key under CeFGC+, where every client holds it), the pair averages
undone where its own generator was the partner, and the (network, class, noise scale)
triples the attacks on shared generators score with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Data

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import ClientView
from fgl_workbench.attacks.base import AttackInput
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.cefgc.diffusion import symmetric_noise
from fgl_workbench.targets.cefgc.generator import (
    ALL_CLASSES,
    GeneratorConfig,
    blank_generator,
    class_scale,
    dense,
    generator_sources,
    trainable,
)
from fgl_workbench.targets.cefgc.pairing import opened
from fgl_workbench.targets.cefgc.score_network import EDPScoreNetwork, pair_mask
from fgl_workbench.transcript import GENERATIVE_MODEL

Source = tuple[EDPScoreNetwork, int, float]  # (network, class, noise scale)


@dataclass(frozen=True)
class ReceivedGenerators:
    config: GeneratorConfig  # the public recipe's generator settings
    sources: list[Source]  # what the client received (undone where it could)
    own_sources: list[Source]  # what it uploaded itself
    recovered: int  # generators recovered exactly from CeFGC+'s averages


def received_generators(
    inp: AttackInput, undo: bool, draws: int, seed: int, name: str
) -> ReceivedGenerators:
    """The curious client's generators, checked: a client's view, graph candidates, a
    target that shares generators. ``undo``: undo CeFGC+'s averages (``undo_pairing``)."""
    view, cands = inp.view, inp.candidates
    if not isinstance(cands, Candidates) or not cands.graphs:
        raise NotApplicableError(f"{name}: graph candidates")
    cfg = generator_recipe(inp, name)
    recipe = inp.knowledge.recipe.config
    features = cands.graphs[0].x.shape[1]
    received = opened_payloads(view.received, view.keys, cfg, features, summands=2)
    own = opened_payloads(view.sent, view.keys, cfg, features, summands=1)
    if not received:
        raise NotApplicableError(f"{name}: the client received no generators")
    recovered = 0
    if recipe.get("pairing") and undo:
        held_out = trainable(list(view.local.val) + list(view.local.test), cfg)
        received, recovered = undo_pairing(received, own, held_out, cfg, draws, seed)
    return ReceivedGenerators(
        cfg,
        generator_sources(received, cfg, features),
        generator_sources(own, cfg, features),
        recovered,
    )


def generator_recipe(inp: AttackInput, name: str) -> GeneratorConfig:
    """The public generator settings, once checked that the adversary is a client of a
    target that shares generators."""
    if not isinstance(inp.view, ClientView):
        raise NotApplicableError(f"{name}: a client's view")
    recipe = inp.knowledge.recipe.config
    if "generator" not in recipe:
        raise NotApplicableError(f"{name}: the target shares no graph generators")
    return GeneratorConfig(**recipe["generator"])


def opened_payloads(messages, keys, cfg: GeneratorConfig, features: int, summands: int):
    """The generator packages in ``messages`` as the client uses them: in the clear, or
    decrypted with its key (CeFGC+; ``summands`` 2 for the received pair sums, 1 for its own
    uploads)."""
    like = blank_generator(cfg, features).state_dict()
    out = []
    for m in messages:
        if m.kind != GENERATIVE_MODEL or not m.payload:
            continue
        for p in m.payload if isinstance(m.payload, list) else [m.payload]:
            if all(isinstance(s, dict) for s in p["models"].values()):
                out.append(p)
            elif keys is None:
                raise NotApplicableError("the generators are encrypted and the client holds no key")
            else:
                out.append(opened(keys, p, like, summands))
    return out


def fit_loss(
    state: dict, key: int, own: list[Data], cfg: GeneratorConfig, draws: int, seed: int
) -> float:
    """How well a generator's weights denoise the client's own graphs of its class (every
    class, each on its schedule, for a label-channel generator): the mean DSM loss."""
    net = blank_generator(cfg, own[0].x.shape[1])
    net.load_state_dict(state)
    net.eval()
    labels = np.array([int(g.y.view(-1)[0]) for g in own])
    classes = np.unique(labels) if key == ALL_CLASSES else np.array([key])
    total, count = 0.0, 0
    for k in classes:
        graphs = [g for g, y in zip(own, labels, strict=True) if y == k]
        if graphs:
            scale = class_scale(int(k)) if key == ALL_CLASSES else 1.0
            total += level_losses(net, graphs, cfg, scale, draws, seed).mean() * len(graphs)
            count += len(graphs)
    return total / count if count else float("inf")


def undo_pairing(
    received: list[dict], own: list[dict], graphs: list[Data], cfg, draws: int, seed: int
) -> tuple[list[dict], int]:
    """CeFGC+'s averages undone where the client's own generator was the partner: a received
    ½(θ_j + θ_i) gives θ_j = 2·avg − θ_i exactly. The client cannot see the pairing, so it
    tries every received average of a pool it has a generator in, and keeps the recovered
    weights when they denoise ``graphs`` of the class better than the average does (a wrong
    guess, θ_j + θ_m − θ_i, is no trained generator). ``graphs`` must be ones its own
    generator did not train on (its validation and test graphs): on its training graphs the
    average, half its own generator, has the edge. Returns the packages and how many
    generators were recovered."""
    mine = {key: state for p in own for key, state in p["models"].items()}
    out, recovered = [], 0
    for p in received:
        models = {}
        for key, avg in p["models"].items():
            models[key] = avg
            if key not in mine or not graphs:
                continue
            guess = {n: 2 * avg[n] - mine[key][n] for n in avg}
            if fit_loss(guess, key, graphs, cfg, draws, seed) < fit_loss(
                avg, key, graphs, cfg, draws, seed
            ):
                models[key] = guess
                recovered += 1
        out.append({"classes": p["classes"], "models": models})
    return out, recovered


@torch.no_grad()
def level_losses(net, graphs, cfg: GeneratorConfig, scale: float, draws: int, seed: int):
    """[levels, graphs]: each graph's DSM loss per ordered pair at each noise level, averaged
    over ``draws`` noise draws (the same draws for every graph and generator)."""
    adj, x, mask = dense(graphs, max(g.num_nodes for g in graphs))
    pairs = pair_mask(mask)
    count = pairs.sum((1, 2)).clamp(min=1).float()
    out = torch.zeros(len(cfg.sigmas), len(graphs))
    for li, sigma in enumerate(cfg.sigmas):
        s = sigma * scale
        level = torch.full((len(graphs),), li, dtype=torch.long)
        for d in range(draws):
            gen = seeded_generator(seed + 1000 * li + d)
            noise = symmetric_noise(tuple(adj.shape), mask, gen) * s
            err = (net(adj + noise, x, mask, level) + noise / s**2) * pairs
            out[li] += 0.5 * s**2 * (err**2).sum((1, 2)) / count
    return (out / draws).numpy(force=True)


def scored_by_class(
    cands: Candidates, cfg: GeneratorConfig, score: Callable[[int, list[Data]], np.ndarray | None]
) -> np.ndarray:
    """Membership scores for graph candidates, one class at a time: ``score(k, graphs)`` gives
    the class's scores, or None where no received generator holds class ``k``. Graphs larger
    than the generators' ``max_nodes`` were never trained on (the recipe is public) and, with
    classes no generator holds, get the lowest score."""
    scores = np.full(len(cands.graphs), -np.inf)
    small = np.array([g.num_nodes <= cfg.max_nodes for g in cands.graphs])
    for k in np.unique(cands.labels):
        idx = np.flatnonzero((cands.labels == k) & small)
        if idx.size:
            got = score(int(k), [cands.graphs[i] for i in idx])
            if got is not None:
                scores[idx] = got
    finite = np.isfinite(scores)
    floor = scores[finite].min() - 1.0 if finite.any() else 0.0
    return np.where(finite, scores, floor)


def class_losses(
    sources: list[Source], k: int, graphs: list[Data], cfg: GeneratorConfig, draws: int, seed
) -> list[np.ndarray]:
    """[levels, graphs] DSM losses of ``graphs`` under every source generator of class ``k``."""
    return [level_losses(net, graphs, cfg, s, draws, seed) for net, c, s in sources if c == k]


def standardised_levels(losses: np.ndarray) -> np.ndarray:
    """Each level's losses as z-scores over the graphs scored together: a generator's overall
    scale (how well it fits any graph) cancels, and no level dominates."""
    return (losses - losses.mean(1, keepdims=True)) / (losses.std(1, keepdims=True) + 1e-12)


def scored_levels(cfg: GeneratorConfig, levels: str) -> np.ndarray:
    """The noise levels an attack scores: those above the median σ, or all."""
    sigmas = np.asarray(cfg.sigmas)
    return sigmas > np.median(sigmas) if levels == "upper" else np.ones(sigmas.size, bool)


def best_fit(got: ReceivedGenerators, records: Candidates, draws: int, seed: int) -> np.ndarray:
    """Each graph's lowest DSM loss over the received generators of its class, averaged over
    the levels above the median σ (where a generator remembers its graphs); NaN where no
    received generator holds its class or it exceeds ``max_nodes`` (never trained on)."""
    cfg = got.config
    used = scored_levels(cfg, "upper")
    out = np.full(len(records.graphs), np.nan)
    small = np.array([g.num_nodes <= cfg.max_nodes for g in records.graphs])
    for k in np.unique(records.labels):
        idx = np.flatnonzero((records.labels == k) & small)
        if idx.size:
            graphs = [records.graphs[i] for i in idx]
            losses = class_losses(got.sources, int(k), graphs, cfg, draws, seed)
            if losses:
                out[idx] = np.min(losses, axis=0)[used].mean(0)
    return out
