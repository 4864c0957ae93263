"""Canary clients: client-level DP-FedAvg (Andrew et al., ICLR 2024) and the Gaussian upload
mechanism, audited from every release their adversary observes.

A canary client's update is a random direction of length ``CANARY_NORM``·clip (so clipping
must act), its sign flipping from round to round in the auditor's secret pattern. Nothing
else contributes: the audit picks the dataset, and an empty federation is the one where a
canary stands out most. Clients take part through the target's own draw
(``dp_fedavg.poisson_clients``), so amplification claimed without that sampling is caught.

Central DP-FedAvg claims an amplified add-or-remove bound against the parties who do not see
the sample (other clients, a querier): they observe every round's global model, and a canary
is scored on each round's change together (``audits.observer``). Local DP-FedAvg and the
Gaussian upload claim a replace-one bound against everyone, without amplification: the
canary's updates are +d or −d (times its pattern), and the strongest observer, the receiver
of each upload (or, under secure aggregation, of each round's sum), scores it on every upload
it saw. Secure aggregation is played as the sum it reveals; the encryption itself (TenSEAL)
is not run."""

from __future__ import annotations

from typing import Any

import torch

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.audits.canary import (
    CANARY_NORM,
    Context,
    Trial,
    canary_directions,
    flips,
    inclusion,
    numpy_rng,
    trial,
)
from fgl_workbench.audits.observer import Observed
from fgl_workbench.defenses import dp_fedavg, gaussian_upload
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.defenses.gaussian_upload import GaussianUploadConfig


def _flat(vector: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"w": vector}


class DPFedAvgGame:
    defense = "dp-fedavg"

    def play(
        self,
        config: DPFedAvgConfig,
        context: Context,
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        q, rounds = _rate_and_rounds(context)
        if config.mode == "central":
            return [_hidden(config, q, rounds, m, context.dimension, generator)]
        secure = "secure-aggregation" in context.configs
        return _uploads(config, q, rounds, m, context.dimension, secure, generator)


def _rate_and_rounds(context: Context) -> tuple[float, int]:
    """The client sampling rate and round count the run used (its target's config)."""
    target = context.target
    if "client_fraction" not in target or "rounds" not in target:
        raise ValueError("dp-fedavg audit: the target's config has no client_fraction/rounds")
    return float(target["client_fraction"]), int(target["rounds"])


def _hidden(config, q, rounds, m, dimension, generator) -> Trial:
    """Add or remove a canary client; the observer sees every round's global model."""
    d, nulls, independent = canary_directions(m, dimension, generator)
    included = inclusion(m, generator)
    signs = flips(rounds, m, generator)
    rng = numpy_rng(generator)
    state = _flat(torch.zeros(dimension, dtype=torch.float64))
    moves = []
    for r in range(rounds):
        taking_part = dp_fedavg.poisson_clients(rng, m, q).tolist()
        uploads = [
            dp_fedavg.client_update(
                _flat(state["w"] + signs[r, i] * CANARY_NORM * config.clip * d[i]),
                state,
                config,
                generator,
            )
            for i in taking_part
            if included[i]
        ]
        new = dp_fedavg.server_aggregate(state, uploads, config, q * m, generator)
        moves.append(new["w"] - state["w"])
        state = new
    moved = torch.stack(moves) * (q * m)  # each round's noisy sum of clipped updates
    observed = Observed(moved @ d.T, (moved @ nulls.T)[:, None], signs, config.clip, rate=q)
    (hidden, _) = dp_fedavg.ledger_events(q, config, rounds, 0.0, False)
    how = f"DP-FedAvg central, q = {q:g}, {rounds} rounds, canary clients, every global model"
    return trial(observed, included, [hidden], "client", how, independent=independent)


def _uploads(config, q, rounds, m, dimension, secure, generator) -> list[Trial]:
    """Replace one canary's data (+d or −d); the server sees each noisy upload (or each
    round's sum under secure aggregation) of the rounds the canary took part in."""
    d, nulls, independent = canary_directions(m, dimension, generator)
    included = inclusion(m, generator)
    sign = included.double() * 2 - 1
    signs = flips(rounds, m, generator)
    rng = numpy_rng(generator)
    reference = _flat(torch.zeros(dimension, dtype=torch.float64))
    part = torch.zeros(rounds, m, dtype=torch.bool)
    own = Projections(rounds, m, d, nulls)  # each upload, as the server sees it
    sums = torch.zeros(rounds, dimension, dtype=torch.float64)  # or only each round's sum
    load = torch.zeros(m, dtype=torch.float64)
    for r in range(rounds):
        # without secure aggregation every canary uploads every round: the claim is for the
        # busiest client, so each canary is one (no amplification is claimed to catch)
        taking_part = dp_fedavg.poisson_clients(rng, m, q).tolist() if secure else list(range(m))
        for i in taking_part:
            update = _flat(sign[i] * signs[r, i] * CANARY_NORM * config.clip * d[i])
            upload = dp_fedavg.client_update(update, reference, config, generator)
            if secure:
                sums[r] += upload
            else:
                own.add(r, i, upload)
        part[r, taking_part] = True
        load[taking_part] += 1.0 / len(taking_part) if secure else 1.0
    (claim,) = dp_fedavg.ledger_events(q, config, rounds, float(load.max()), secure)
    how = (
        f"DP-FedAvg local{' + secure aggregation' if secure else ''}, q = {q:g}, "
        f"{rounds} rounds, canary clients (replace one), every upload"
    )
    if secure:  # only each round's sum reaches the server
        observed = Observed(
            sums @ d.T, (sums @ nulls.T)[:, None], signs * part, config.clip, replace=True
        )
        return [trial(observed, included, [claim], "client", how, independent=independent)]
    return upload_trials(own, part, signs, config.clip, included, claim, how, independent)


class Projections:
    """Each canary's own releases (its uploads) as the observer keeps them: projected on the
    canary's direction and on the null directions as they arrive, and on every canary's
    direction, so that each upload can also be read beside another canary's of the same
    round (``across``)."""

    def __init__(self, releases: int, m: int, d: torch.Tensor, nulls: torch.Tensor) -> None:
        self.d, self.nulls = d, nulls
        self.signal = torch.zeros(releases, m, dtype=torch.float64)
        self.null = torch.zeros(releases, m, nulls.shape[0], dtype=torch.float64)
        # one-hot canary directions are read as coordinates: m projections for m reads
        one_hot = bool(((d != 0).sum(1) == 1).all())
        self.coordinates = d.argmax(1) if one_hot else None
        self.beside = torch.full((releases, m), torch.nan, dtype=torch.float64)
        self.beside_null = torch.full_like(self.null, torch.nan)
        self.round: int | None = None
        self.seen = torch.full((m, m), torch.nan, dtype=torch.float64)  # [uploader, canary]

    def add(self, r: int, i: int, release: torch.Tensor) -> None:
        if r != self.round:
            self._close()
            self.round = r
        release = release.double()
        self.signal[r, i] = self.d[i] @ release
        self.null[r, i] = self.nulls @ release
        c = self.coordinates
        self.seen[i] = release[c] if c is not None else self.d @ release

    def observed(self, part: torch.Tensor, signs: torch.Tensor, unit: float) -> Observed:
        """Replace-one evidence where ``part`` [R, m] says a release was made, in the order
        each canary made them: its k-th release beside its (k − 1)-th, each with its own
        noise measured on the null directions."""
        order = torch.argsort((~part).int(), dim=0, stable=True)  # each canary's releases first
        made = torch.gather(part, 0, order)
        signal = torch.where(made, torch.gather(self.signal, 0, order), torch.nan)
        null = torch.gather(self.null, 0, order[..., None].expand_as(self.null))
        null = torch.where(made[..., None], null, torch.nan)
        return Observed(signal, null, torch.gather(signs, 0, order) * made, unit, replace=True)

    def across(self, part: torch.Tensor, signs: torch.Tensor, unit: float) -> Observed:
        """Replace-one evidence of each upload minus the upload of the same round whose null
        projections are most alike its own, or plus the one most opposite (both read on the
        canary's direction): noise that clients of a round share, as it is or negated (every
        client's generator seeded alike), cancels there, and each canary's evidence alone
        would not show it. Noise spread over three or more clients that cancels only in their
        sum is not caught. The partner is chosen from the
        output, so one-run bounds hold; the canaries are no longer independent runs."""
        self._close()
        made = part & torch.isfinite(self.beside)
        signal = torch.where(made, self.beside, torch.nan)
        null = torch.where(made[..., None], self.beside_null, torch.nan)
        return Observed(signal, null, signs * made, unit, replace=True, paired=False)

    def _close(self) -> None:
        """The round being received is complete: each of its uploads beside its partner's."""
        r, self.round = self.round, None
        uploaded = torch.isfinite(self.seen[:, 0]).nonzero().flatten()
        if r is None or len(uploaded) < 2:
            self.seen.fill_(torch.nan)
            return
        null = self.null[r, uploaded]
        unit_null = null / null.norm(dim=1, keepdim=True).clamp(min=1e-300)
        alike = unit_null @ unit_null.T
        alike.fill_diagonal_(0.0)
        best = alike.abs().argmax(1)
        # noise shared with its sign flipped (one client adds z, another −z) cancels in the sum
        sign = torch.sign(alike[torch.arange(len(uploaded)), best]).clamp(min=-1, max=1)
        sign[sign == 0] = 1.0
        partner = uploaded[best]
        own = self.seen[uploaded, uploaded]
        self.beside[r, uploaded] = own - sign * self.seen[partner, uploaded]
        self.beside_null[r, uploaded] = null - sign[:, None] * self.null[r, partner]
        self.seen.fill_(torch.nan)


ACROSS = ", each beside the most alike upload of its round"


def upload_trials(
    own: Projections,
    part: torch.Tensor,
    signs: torch.Tensor,
    unit: float,
    included: torch.Tensor,
    claim: Any,
    how: str,
    independent: bool,
) -> list[Trial]:
    """The replace-one claim audited twice on the uploads the server saw: each canary on its
    own uploads, and each beside the most alike upload of its round (``Projections.across``),
    where noise the clients of a round share cancels."""
    return [
        trial(
            own.observed(part, signs, unit),
            included,
            [claim],
            "client",
            how,
            independent=independent,
        ),
        trial(own.across(part, signs, unit), included, [claim], "client", how + ACROSS),
    ]


class GaussianUploadGame:
    defense = "gaussian-upload"

    def play(
        self,
        config: GaussianUploadConfig,
        context: Context,
        m: int,
        generator: torch.Generator,
    ) -> list[Trial]:
        uploads = self._uploads(context.ledger, config)
        if uploads == 0:
            return []
        (claim,) = gaussian_upload.ledger_events(config, uploads)
        dimension = context.dimension
        d, nulls, independent = canary_directions(m, dimension, generator)
        included = inclusion(m, generator)
        sign = included.double() * 2 - 1
        signs = flips(uploads, m, generator)
        own = Projections(uploads, m, d, nulls)
        for r in range(uploads):
            for i in range(m):
                upload = sign[i] * signs[r, i] * CANARY_NORM * config.clip * d[i]
                own.add(r, i, gaussian_upload.privatize(upload, config, generator))
        part = torch.ones(uploads, m, dtype=torch.bool)
        how = f"Gaussian upload, {uploads} uploads, canary clients (replace one), every upload"
        return upload_trials(own, part, signs, config.clip, included, claim, how, independent)

    @staticmethod
    def _uploads(ledger: PrivacyLedger, config: GaussianUploadConfig) -> int:
        """The run's upload count: its Gaussian event at this config's noise (0: none)."""
        for e in ledger.events:
            same = getattr(e, "sigma", None) == config.noise_multiplier * config.sensitivity
            if same and getattr(e, "sensitivity", None) == config.sensitivity:
                return e.count
        return 0
