"""Canary records for DP-SGD: gradient canaries in the white-box setting (Steinke, Nasr &
Jagielski 2023, §6). A canary record's gradient is a fixed random direction of length
``CANARY_NORM``·clip at every step (DP-SGD must protect any record, including one whose
gradient is that); each is included with probability 1/2 and then joins each step's batch
with the Poisson rate, through Opacus's DPOptimizer exactly as a client's training does. The
adversary sees the model after training (every party that receives a client's model does)
and scores a canary by how far the parameters moved against its direction. Nothing else is
trained on, so the canaries stand out as much as they can. A unit that touches several
records (a real graph and its feature copies in CeFGC) is a canary of that many records."""

from __future__ import annotations

import math

import torch
from torch import nn

from accountants import PrivacyLedger, SubsampledGaussian
from audits.canary import CANARY_NORM, Context, Trial, broken_scale, directions, inclusion, trial
from defenses import dp_sgd
from defenses.dp_sgd import DPSGDConfig


class _Vector(nn.Module):
    """A model that is just its parameter vector: its gradient is whatever the record says."""

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(dimension, dtype=torch.float64))


class DPSGDGame:
    defense = "dp-sgd"

    def play(
        self,
        config: DPSGDConfig,
        context: Context,
        mechanism: DPSGDConfig,
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        return [
            self._trial(config, event, group, mechanism, m, context.dimension, generator)
            for event, group in self._events(context.ledger, config)
        ]

    @staticmethod
    def _events(ledger: PrivacyLedger, config: DPSGDConfig) -> list[tuple[SubsampledGaussian, int]]:
        """The run's DP-SGD events (record-level subsampled Gaussians at this config's σ),
        each with the group size it accounts; none: no DP-SGD step ran, nothing to audit."""
        found = []
        for e in ledger.events:
            if isinstance(e, SubsampledGaussian) and e.scope is not None:
                group = _group(config.sample_rate, e.q)
                same_noise = math.isclose(e.sigma * group, config.noise_multiplier)
                if e.scope.unit != "client" and same_noise:
                    found.append((e, group))
        return found

    @staticmethod
    def _trial(config, event, group, mechanism, m, dimension, generator) -> Trial:
        d = directions(m, dimension, generator)
        included = inclusion(m, generator)
        owner = included.nonzero().flatten().repeat_interleave(group)  # each unit's records
        model = _Vector(dimension)
        optimizer = dp_sgd.private_optimizer(
            torch.optim.SGD(model.parameters(), lr=1.0), mechanism, m * group, generator
        )
        for _ in range(event.steps):
            batch = owner[torch.rand(owner.numel(), generator=generator) < config.sample_rate]
            dp_sgd.private_step(model, optimizer, [CANARY_NORM * config.clip * d[batch]])
        scores = -(d @ model.w.detach())  # descent moves against a canary's gradient
        what = "record" if group == 1 else f"unit of {group} records"
        how = (
            f"DP-SGD, q = {config.sample_rate:g}, {event.steps} steps, gradient canaries "
            f"(one {what} each), final model"
        )
        return trial(scores, included, [event], event.scope.unit, how)

    def broken(self, config: DPSGDConfig) -> DPSGDConfig:
        clip, sigma = broken_scale(config.clip, config.noise_multiplier)
        return config.model_copy(update={"clip": clip, "noise_multiplier": sigma})


def _group(q: float, q_group: float) -> int:
    """g with 1 − (1 − q)^g = q_group (``dp_sgd.ledger_event``'s group amplification)."""
    if q >= 1.0 or q_group >= 1.0:
        return 1
    return max(1, round(math.log1p(-q_group) / math.log1p(-q)))
