"""Canary clients: client-level DP-FedAvg (Andrew et al., ICLR 2024) and the Gaussian upload
mechanism.

A canary client's update is a random direction of length ``CANARY_NORM``·clip (so clipping
must act). Nothing else contributes: the audit picks the dataset, and an empty federation is
the one where a canary stands out most.

Central DP-FedAvg claims an amplified add-or-remove bound against the parties who do not see
the sample (other clients, a querier): they observe the global models, and a canary is scored
by the cosine between the model's total change and its direction (Andrew et al.). Local
DP-FedAvg and the Gaussian upload claim a replace-one bound against everyone, without
amplification: the canary's update is +d or −d, and the strongest observer, the receiver of
each upload (or, under secure aggregation, of each round's sum), scores it by the sum over its
uploads of what it saw projected on d. Secure aggregation is played as the sum it reveals;
the encryption itself (TenSEAL) is not run."""

from __future__ import annotations

import torch

from accountants import PrivacyLedger
from audits.canary import CANARY_NORM, Context, Trial, broken_scale, directions, inclusion, trial
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
        q, rounds = _rate_and_rounds(context)
        d = directions(m, context.dimension, generator)
        if config.mode == "central":
            return [_hidden(config, mechanism, q, rounds, d, generator)]
        secure = "secure-aggregation" in context.configs
        return [_uploads(config, mechanism, q, rounds, d, secure, generator)]

    def broken(self, config: DPFedAvgConfig) -> DPFedAvgConfig:
        clip, sigma = broken_scale(config.clip, config.noise_multiplier)
        return config.model_copy(update={"clip": clip, "noise_multiplier": sigma})


def _rate_and_rounds(context: Context) -> tuple[float, int]:
    """The client sampling rate and round count the run used (its target's config)."""
    target = context.target
    if "client_fraction" not in target or "rounds" not in target:
        raise ValueError("dp-fedavg audit: the target's config has no client_fraction/rounds")
    return float(target["client_fraction"]), int(target["rounds"])


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
                _flat(state["w"] + CANARY_NORM * config.clip * d[i]), state, mechanism, generator
            )
            for i in sampled.nonzero().flatten().tolist()
        ]
        state = dp_fedavg.server_aggregate(state, uploads, mechanism, q * m, generator)
    change = state["w"] - start
    scores = (d @ change) / max(float(change.norm()), 1e-300)  # cosine: d is unit norm
    (hidden, _) = dp_fedavg.ledger_events(q, config, rounds, 0.0, False)
    how = f"DP-FedAvg central, q = {q:g}, {rounds} rounds, canary clients, cosine"
    return trial(scores, included, [hidden], "client", how)


def _uploads(config, mechanism, q, rounds, d, secure, generator) -> Trial:
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
    (claim,) = dp_fedavg.ledger_events(q, config, rounds, float(load.max()), secure)
    how = (
        f"DP-FedAvg local{' + secure aggregation' if secure else ''}, q = {q:g}, "
        f"{rounds} rounds, canary clients (replace one), uploads projected"
    )
    return trial(scores, included, [claim], "client", how)


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
        uploads = self._uploads(context.ledger, config)
        if uploads == 0:
            return []
        (claim,) = gaussian_upload.ledger_events(config, uploads)
        d = directions(m, context.dimension, generator)
        included = inclusion(m, generator)
        sign = included.double() * 2 - 1
        scores = torch.zeros(m, dtype=torch.float64)
        for _ in range(uploads):
            for i in range(m):
                upload = sign[i] * CANARY_NORM * config.clip * d[i]
                scores[i] += d[i] @ gaussian_upload.privatize(upload, mechanism, generator)
        how = f"Gaussian upload, {uploads} uploads, canary clients (replace one)"
        return [trial(scores, included, [claim], "client", how)]

    @staticmethod
    def _uploads(ledger: PrivacyLedger, config: GaussianUploadConfig) -> int:
        """The run's upload count: its Gaussian event at this config's noise (0: none)."""
        for e in ledger.events:
            same = getattr(e, "sigma", None) == config.noise_multiplier * config.sensitivity
            if same and getattr(e, "sensitivity", None) == config.sensitivity:
                return e.count
        return 0

    def broken(self, config: GaussianUploadConfig) -> GaussianUploadConfig:
        clip, sigma = broken_scale(config.clip, config.noise_multiplier)
        return config.model_copy(update={"clip": clip, "noise_multiplier": sigma})
