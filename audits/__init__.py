"""Canary audits: empirical lower bounds on ε, from the defenses' own mechanisms, that fail
when a mechanism leaks more than its ledger says. One game per DP defense; ``audit_run``
plays every game a run's defenses have, at the run's parameters. Imports accountants, the
shared modules, data, models, defenses and targets; reports, running and interface import it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from fgl_workbench.audits.canary import CanaryAudit, Context, Game, Trial, judged
from fgl_workbench.audits.clients import DPFedAvgGame, GaussianUploadGame
from fgl_workbench.audits.message_passing import APGame
from fgl_workbench.audits.records import DPSGDGame
from fgl_workbench.audits.release import MetricDPGame
from fgl_workbench.device import seeded_generator
from fgl_workbench.seeding import derive_seed

GAMES: dict[str, Game] = {
    g.defense: g
    for g in (DPFedAvgGame(), DPSGDGame(), GaussianUploadGame(), APGame(), MetricDPGame())
}
MAX_DIMENSION = 10_000  # canary vectors are this long at most (nearly orthogonal already)


def context_of(trained: Any, defenses: Sequence[Any]) -> Context:
    """A trained target's mechanism parameters: its ledger, its defenses' configs, its
    released model's size, the ρ its metric-DP ε is read at and its target's config."""
    model = trained.global_model
    size = sum(p.numel() for p in model.parameters()) if model is not None else MAX_DIMENSION
    return Context(
        trained.ledger,
        {d.name: d.config for d in defenses},
        max(2, min(int(size), MAX_DIMENSION)),
        trained.utility.get("metric_rho"),
        dict(trained.recipe.config),
        trained.name,
    )


def game_for(context: Context, defense: str) -> Game | None:
    """The game that plays ``defense`` with the code the run used: Flower's own DP wrappers
    and mods on the flower target (``audits.flower``, imported only there, as Flower is an
    optional extra), the workbench's mechanisms elsewhere."""
    if context.target_name == "flower" and defense == "dp-fedavg":
        from fgl_workbench.audits.flower import FlowerDPGame

        return FlowerDPGame()
    return GAMES.get(defense)


def audit_run(
    context: Context,
    defenses: Sequence[Any],
    delta: float,
    canaries: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> list[CanaryAudit]:
    """Every game of the run's DP defenses (``AppliedDefense``s) on ``canaries`` canaries. A
    run's mechanisms with no event in its ledger (nothing of theirs ran) are not audited."""
    played = []
    for d in defenses:
        game = game_for(context, d.name)
        if game is None:
            continue
        generator = seeded_generator(derive_seed(seed, f"canary-{d.name}"))
        start = time.perf_counter()
        trials = game.play(d.config, context, canaries, generator)
        seconds = (time.perf_counter() - start) / max(len(trials), 1)
        played += [(d.name, t, seconds) for t in trials]
    # every bound of the run holds at once with probability ``confidence`` (Bonferroni)
    each = 1 - (1 - confidence) / max(len(played), 1)
    return [judged(name, t, delta, seconds, each) for name, t, seconds in played]


__all__ = [
    "GAMES",
    "CanaryAudit",
    "Context",
    "Game",
    "Trial",
    "audit_run",
    "context_of",
    "game_for",
]
