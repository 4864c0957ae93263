"""Canary clients: client-level DP-FedAvg (Andrew et al., ICLR 2024) and the Gaussian upload
mechanism.

A canary client's update is a random direction of length ``CANARY_NORM``·clip (so clipping
must act). Nothing else contributes: the audit picks the dataset, and an empty federation is
the one where a canary stands out most. Adversaries who do not see the sample (other clients,
a querier) observe the global model: a canary is scored by the cosine between the model's
total change and its direction. The server, which sees each upload (or, under secure
aggregation, each round's sum), scores a canary by the sum over its rounds of what it saw
projected on its direction; there the relation is replace-one (a canary's update is +d or −d)."""

from __future__ import annotations

import torch

from accountants import PrivacyLedger
from audits.canary import CANARY_NORM, Context, Trial, broken_scale, directions, inclusion
from defenses import dp_fedavg, gaussian_upload
from defenses.dp_fedavg import DPFedAvgConfig
from defenses.gaussian_upload import GaussianUploadConfig


def _flat(vector: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"w": vector}


class DPFedAvgGame:
    defense = "dp-fedavg"

    def play(
        self,
        config: DPFedAvgConfig,
        context: Context,
        mechanism: DPFedAvgConfig,
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        q, rounds = self._rate_and_rounds(context.ledger)
        secure = "secure-aggregation" in context.configs
        d = directions(m, context.dimension, generator)
        trials = [self._hidden(config, mechanism, q, rounds, d, generator)]
        if config.mode == "local":  # central mode claims nothing against the server
            trials.append(self._server(config, mechanism, q, rounds, d, secure, generator))
        return trials

    @staticmethod
    def _rate_and_rounds(ledger: PrivacyLedger) -> tuple[float, int]:
        for e in ledger.events:
            if e.scope is not None and e.scope.neighbouring == dp_fedavg.HIDDEN_SAMPLE:
                return e.q, e.steps
        raise ValueError("dp-fedavg audit: the run's ledger has no DP-FedAvg event")

    @staticmethod
    def _hidden(config, mechanism, q, rounds, d, generator) -> Trial:
        """Add or remove a canary client; the observer sees only the global models."""
        m = d.shape[0]
        included = inclusion(m, generator)
        state = _flat(torch.zeros(d.shape[1], dtype=torch.float64))
        start = state["w"].clone()
        for _ in range(rounds):
            sampled = included & (torch.rand(m, generator=generator) < q)
            uploads = [
                dp_fedavg.client_update(
                    _flat(state["w"] + CANARY_NORM * config.clip * d[i]),
                    state,
                    mechanism,
                    generator,
                )
                for i in sampled.nonzero().flatten().tolist()
            ]
            state = dp_fedavg.server_aggregate(state, uploads, mechanism, q * m, generator)
        change = state["w"] - start
        scores = (d @ change) / max(float(change.norm()), 1e-300)  # cosine: d is unit norm
        hidden, _ = dp_fedavg.ledger_events(q, config, rounds, 0.0, False)
        return Trial(
            scores.numpy(),
            included.numpy(),
            PrivacyLedger((hidden,)),
            hidden.scope.adversaries,
            "client",
            f"DP-FedAvg {config.mode}, q = {q:g}, {rounds} rounds, canary clients, cosine",
        )

    @staticmethod
    def _server(config, mechanism, q, rounds, d, secure, generator) -> Trial:
        """Replace one canary's data (+d or −d); the server sees each noisy upload (or each
        round's sum under secure aggregation) of the rounds the canary took part in."""
        m = d.shape[0]
        included = inclusion(m, generator)
        sign = included.double() * 2 - 1
        reference = _flat(torch.zeros(d.shape[1], dtype=torch.float64))
        scores = torch.zeros(m, dtype=torch.float64)
        load = torch.zeros(m, dtype=torch.float64)
        for _ in range(rounds):
            sampled = (torch.rand(m, generator=generator) < q).nonzero().flatten()
            if sampled.numel() == 0:
                continue
            uploads = torch.stack(
                [
                    dp_fedavg.client_update(
                        _flat(sign[i] * CANARY_NORM * config.clip * d[i]),
                        reference,
                        mechanism,
                        generator,
                    )
                    for i in sampled.tolist()
                ]
            )
            if secure:  # only the round's sum reaches the server
                scores[sampled] += d[sampled] @ uploads.sum(0)
                load[sampled] += 1.0 / sampled.numel()
            else:
                scores[sampled] += (d[sampled] * uploads).sum(1)
                load[sampled] += 1.0
        _, server = dp_fedavg.ledger_events(q, config, rounds, float(load.max()), secure)
        return Trial(
            scores.numpy(),
            included.numpy(),
            PrivacyLedger((server,)),
            server.scope.adversaries,
            "client",
            f"DP-FedAvg local{' + secure aggregation' if secure else ''}, q = {q:g}, "
            f"{rounds} rounds, canary clients (replace one), uploads projected",
        )

    def broken(self, config: DPFedAvgConfig) -> DPFedAvgConfig:
        clip, sigma = broken_scale(config.clip, config.noise_multiplier)
        return config.model_copy(update={"clip": clip, "noise_multiplier": sigma})


class GaussianUploadGame:
    defense = "gaussian-upload"

    def play(
        self,
        config: GaussianUploadConfig,
        context: Context,
        mechanism: GaussianUploadConfig,
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        events = gaussian_upload.ledger_events(config, self._uploads(context.ledger, config))
        uploads = events[0].count
        d = directions(m, context.dimension, generator)
        included = inclusion(m, generator)
        scores = torch.zeros(m, dtype=torch.float64)
        replace = config.neighbouring == "replace"
        sign = included.double() * 2 - 1 if replace else included.double()
        for _ in range(uploads):
            noisy = torch.stack(
                [
                    gaussian_upload.privatize(
                        sign[i] * CANARY_NORM * config.clip * d[i], mechanism, generator
                    )
                    for i in range(m)
                    if replace or included[i]
                ]
            )
            # replace: each upload is seen; add-remove: the protected parties see the sum
            scores += (d * noisy).sum(1) if replace else d @ noisy.sum(0)
        claim = events[0]
        return [
            Trial(
                scores.numpy(),
                included.numpy(),
                PrivacyLedger((claim,)),
                claim.scope.adversaries,
                "client",
                f"Gaussian upload ({config.neighbouring}), {uploads} uploads, canary clients",
            )
        ]

    @staticmethod
    def _uploads(ledger: PrivacyLedger, config: GaussianUploadConfig) -> int:
        for e in ledger.events:
            same = getattr(e, "sigma", None) == config.noise_multiplier * config.sensitivity
            if same and getattr(e, "sensitivity", None) == config.sensitivity:
                return e.count
        raise ValueError("gaussian-upload audit: the run's ledger has no Gaussian upload event")

    def broken(self, config: GaussianUploadConfig) -> GaussianUploadConfig:
        clip, sigma = broken_scale(config.clip, config.noise_multiplier)
        return config.model_copy(update={"clip": clip, "noise_multiplier": sigma})
