"""Canary edges and nodes for GAP's aggregation perturbation. Every canary lives in its own
component of a graph of random unit-norm rows: an edge canary is an undirected edge between
two fresh nodes, a node canary is a fresh node with out-edges to fresh receivers; each is
present with probability 1/2. The defense's own ``perturbed_hops`` runs twice (training and
inference, as the ledger counts), and the adversary, who sees every perturbed hop, takes as a
canary's evidence in each hop how much each receiving row moved towards its sender's row of
the previous hop, and scores all hops together, each weighed by its noise as measured on
canaries that are never included (``audits.observer``); each canary alone in its component is
an independent run of the mechanism, so the held-out test applies. Node canaries have twice the
out-degree bound, which the defense's ``bound_out_degree`` must cut (the node level's
clipping)."""

from __future__ import annotations

import torch

from fgl_workbench.accountants import Gaussian
from fgl_workbench.audits.canary import NULLS, Context, Trial, inclusion, trial
from fgl_workbench.audits.observer import Observed
from fgl_workbench.defenses import aggregation_perturbation as ap
from fgl_workbench.defenses.aggregation_perturbation import APConfig

FEATURES = 64  # width of the encoded rows the sums run over


class APGame:
    defense = "aggregation-perturbation"

    def play(
        self, config: APConfig, context: Context, m: int, generator: torch.Generator
    ) -> list[Trial]:
        events = [
            e
            for e in context.ledger.events
            if isinstance(e, Gaussian) and e.scope is not None and e.scope.unit == config.level
        ]
        if not events:
            return []  # no perturbed aggregation ran
        if config.level == "edge":
            return [_trial(config, events, m, 1, generator)]
        # node canaries have more out-edges than the bound (AP's clipping), which must cut
        # them: twice (the noise is seen best) and four times (a bound set too high shows)
        return [_trial(config, events, m, k * config.max_degree, generator) for k in (2, 4)]


def _trial(config: APConfig, events: list, m: int, fanout: int, generator) -> Trial:
    # after the m canaries, NULLS never included (the observer's measure of the noise) and
    # NULLS always included (its measure of how far a kept edge moves a row): no statistic
    # depends on which canaries were included, so each canary, alone in its component, is
    # an independent run of the mechanism
    senders, receivers, owner = _canary_edges(m + 2 * NULLS, fanout, config.level)
    nodes = int(torch.cat([senders, receivers]).max()) + 1
    included = inclusion(m, generator)
    always, never = torch.ones(NULLS, dtype=torch.bool), torch.zeros(NULLS, dtype=torch.bool)
    present = torch.cat([included, never, always])[owner]
    edge_index = torch.stack([senders[present], receivers[present]])
    if config.level == "node":
        edge_index = ap.bound_out_degree(edge_index, config.max_degree, generator)
    x0 = torch.randn(nodes, FEATURES, generator=generator)
    evidence = []
    for event in events:
        hops = ap.perturbed_hops(x0, edge_index, event.count, config, generator)
        for before, after in zip(hops, hops[1:], strict=False):
            moved = (after[receivers] * before[senders]).sum(1).double()
            # one row per edge slot: each canary's k-th edge (edges: each direction)
            edge = config.level == "edge"
            evidence.append(moved.view(2, -1) if edge else moved.view(-1, fanout).T)
    seen = torch.cat(evidence)  # [every perturbed hop × edge slot, canaries, nulls, always]
    canaries, nulls, calibration = seen[:, :m], seen[:, m : m + NULLS], seen[:, m + NULLS :]
    # the share of a node canary's edges the degree bound keeps, unseen by the adversary
    rate = 1.0 if config.level == "edge" else min(1.0, config.max_degree / fanout)
    unit = max(float(calibration.mean() - nulls.mean()) / rate, 1e-6)
    ones = torch.ones_like(canaries)
    observed = Observed(canaries, nulls[:, None], ones, unit, rate, paired=False)
    what = "undirected edge" if config.level == "edge" else f"node with {fanout} out-edges"
    how = (
        f"aggregation perturbation, {len(events)} × {events[0].count} hops, canary {what}s, "
        "every perturbed hop"
    )
    return trial(observed, included, events, config.level, how, independent=True)


def _canary_edges(m: int, fanout: int, level: str):
    """(senders, receivers, owning canary) of every canary's directed edges, disjoint nodes."""
    if level == "edge":  # u_i = 2i, v_i = 2i + 1, both directions
        u, v = torch.arange(m) * 2, torch.arange(m) * 2 + 1
        return torch.cat([u, v]), torch.cat([v, u]), torch.arange(m).repeat(2)
    block = fanout + 1  # the canary node, then its receivers
    owner = torch.arange(m).repeat_interleave(fanout)
    senders = owner * block
    receivers = senders + 1 + torch.arange(fanout).repeat(m)
    return senders, receivers, owner
