"""Canary records for DP-SGD: gradient canaries in the white-box setting (Steinke, Nasr &
Jagielski 2023, §6). A canary record's gradient is a fixed random direction of length
``CANARY_NORM``·clip (DP-SGD must protect any record, including one whose gradient is that),
its sign flipping from step to step in the auditor's secret pattern; each is included with
probability 1/2 and then joins each step's batch through the target's own Poisson draw and
steps (``dp_sgd.dp_steps``, which every DP-SGD client's training runs), through Opacus's
DPOptimizer. DP-SGD's claim covers every noisy step (it composes them), so the adversary sees
the model after each step and scores a canary on all of them together (``audits.observer``).
Nothing else is trained on, so the canaries stand out as much as they can. A unit that
touches several records (a real graph and its feature copies in CeFGC) is a canary of that
many records."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn

from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian
from fgl_workbench.audits.canary import (
    CANARY_NORM,
    Context,
    Trial,
    canary_directions,
    flips,
    inclusion,
    trial,
)
from fgl_workbench.audits.observer import Observed
from fgl_workbench.defenses import dp_sgd
from fgl_workbench.defenses.dp_sgd import DPSGDConfig


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
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        return [
            self._trial(config, event, group, m, context.dimension, generator)
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
    def _trial(config, event, group, m, dimension, generator) -> Trial:
        d, nulls, independent = canary_directions(m, dimension, generator)
        included = inclusion(m, generator)
        epochs = event.steps // config.steps_per_epoch  # whole epochs, as clients train
        steps = dp_sgd.steps_for(config, epochs)
        signs = flips(steps, m, generator)
        owner = included.nonzero().flatten().repeat_interleave(group)  # each unit's records
        model = _Vector(dimension)
        optimizer = dp_sgd.private_optimizer(
            torch.optim.SGD(model.parameters(), lr=1.0), config, owner.numel(), generator
        )
        seen = _Steps(model, d, nulls)

        def gradients(batch: torch.Tensor) -> list[torch.Tensor]:
            seen.look()  # the model before this step (after the last)
            sign = signs[seen.looks - 1, owner[batch]]
            return [sign[:, None] * CANARY_NORM * config.clip * d[owner[batch]]]

        dp_sgd.dp_steps(model, optimizer, owner.numel(), epochs, config, generator, gradients)
        seen.look()
        # Opacus divides by q·(records held); the auditor rescales by its expectation, so no
        # score depends on how many canaries were included (the challenger's secret)
        batch = max(1.0, config.sample_rate * group * m / 2)
        observed = Observed(
            -torch.stack(seen.signal) * batch,  # descent moves against a canary's gradient
            -torch.stack(seen.null)[:, None] * batch,
            signs,
            config.clip,
            rate=event.q,
        )
        what = "record" if group == 1 else f"unit of {group} records"
        how = (
            f"DP-SGD, q = {config.sample_rate:g}, {steps} steps, gradient canaries "
            f"(one {what} each), every step's model"
        )
        claim = replace(event, steps=steps)
        return trial(observed, included, [claim], event.scope.unit, how, independent=independent)


class _Steps:
    """Each step's change of the model, projected on the canaries' and the null directions
    as the observer sees the steps go by."""

    def __init__(self, model: _Vector, d: torch.Tensor, nulls: torch.Tensor) -> None:
        self.model, self.d, self.nulls = model, d, nulls
        self.last: torch.Tensor | None = None
        self.looks = 0
        self.signal: list[torch.Tensor] = []
        self.null: list[torch.Tensor] = []

    def look(self) -> None:
        self.looks += 1
        now = self.model.w.detach().clone()
        if self.last is not None:
            moved = now - self.last
            self.signal.append(self.d @ moved)
            self.null.append(self.nulls @ moved)
        self.last = now


def _group(q: float, q_group: float) -> int:
    """g with 1 − (1 − q)^g = q_group (``dp_sgd.ledger_event``'s group amplification)."""
    if q >= 1.0 or q_group >= 1.0:
        return 1
    return max(1, round(math.log1p(-q_group) / math.log1p(-q)))
