"""Membership inference from every round of the transcript, not only the last upload.

Server (FedMIA, Zhu et al. 2024, "all for one"): a record belongs to at most one client, so
at round t the other clients' uploads are models that did not train on it. For client k and
record x, s_j^t(x) is the true-label logit margin under client j's upload of round t; the
others' margins are a Gaussian sample of the non-member distribution, and client k's margin is
tested against it one-sided: z_k^t(x) = (s_k^t(x) − mean_{j≠k} s_j^t(x)) / (σ_t·√(1 + 1/n)),
with n the number of others and σ_t their spread (per record, as the paper fits it, or pooled
over the records of the round: with a few clients, two or three others, a per-record
variance is mostly noise). The rounds are combined (Stouffer's Σz/√T, or Fisher's −Σlog p
turned back into one p-value) so clients with different participation compare; the server does
not know the owner, so a record's score is its largest over clients, and each client's score
goes to ``details["per_model"]`` (client k's AUC on client k's records).

Server, ``reference: start``: client k's upload against the global model the server sent it
that round, the model its local training started from. Δ_k^t(x) = s_k^t(x) − s(θ^t, x) is
how much k's training moved the margin; it is standardised by the auxiliary pool's Δ_k^t
(known non-members, moved only by generalisation) and the rounds combined as above. Unlike
the others' test it needs no other uploader, and other clients' data (a different community,
a different class mix) does not enter the reference.

Curious client: the global models it was sent θ^0, θ^1, … (decrypted under FedAvg's secure
aggregation, which it holds the key of). Each round's improvement of the margin,
Δ_t(x) = s(θ^{t+1}, x) − s(θ^t, x), is standardised by the auxiliary pool's improvements that
round (known non-members) and the rounds are combined as above: members improve more than
non-members, round after round, whether or not the last model still shows it.

``signal: gradient`` (FedMIA's gradient test) replaces the margin by a record's gradient
against the update: per round, the cosine between the record's descent direction
−∇ℓ(θ, x) at the model θ the update produced and the update θ − θ₀ (the server: each client's
upload against the global model it started from; the client: each global model against the
one before), standardised by the pool's cosines that round and combined as above. A client's
update is a sum of its members' gradient steps, so a member's own direction points along it.

Both need every round's payloads (the target's ``keep_payloads: all``), or the last
``window`` rounds'. The threshold is the (1 − fpr) quantile of the auxiliary pool's scores."""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from scipy.stats import chi2, norm

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge, ClientView, ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import (
    per_model_output,
    query,
    rebuilt_api,
    sealed,
    true_label_logit_margin,
)
from fgl_workbench.attacks.membership.record_gradients import record_forwards, update_cosines
from fgl_workbench.attacks.membership.reference import union
from fgl_workbench.defenses.dp_fedavg import aggregate_mean, apply_update
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.models import ModelSpec
from fgl_workbench.transcript import CIPHERTEXT, MODEL_WEIGHTS, SERVER, Message

NAME = "mia-fedmia"
State = dict[str, torch.Tensor]
KEEP_ALL = "set the target's keep_payloads: all, or a smaller window"


class AllRoundsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["server", "client"] = Field(
        "server",
        description="server: every client's upload of every round (FedMIA); client: the "
        "global models the curious client was sent",
    )
    client: int = Field(0, ge=0, description="the curious client (adversary: client)")
    hops: int = Field(0, ge=0, le=5, description="node queries: 0 = node alone, k = k-hop subgraph")
    signal: Literal["margin", "gradient"] = Field(
        "margin",
        description="margin: the true-label logit margin; gradient: per round, the cosine "
        "between a record's descent direction at the updated model and the update (the "
        "server: each upload against the model it started from, whatever reference says; "
        "the client: each global model against the one before), standardised by the pool's "
        "(FedMIA's gradient test; one backward per record and model: window bounds it)",
    )
    window: int | None = Field(
        None,
        ge=1,
        description="read only the last `window` rounds (none: every round; 1 under the "
        "target's default keep_payloads: last_round)",
    )
    reference: Literal["others", "start"] = Field(
        "others",
        description="server: each upload against the other clients' uploads of the round "
        "(FedMIA's all-for-one), or against the global model it started from (its own "
        "training's move, standardised by the pool's)",
    )
    variance: Literal["pooled", "per-record"] = Field(
        "pooled",
        description="server: the others' spread pooled over the records of the round, or "
        "each record's own (FedMIA's fit; noisy with few clients)",
    )
    combine: Literal["stouffer", "fisher"] = Field(
        "stouffer", description="rounds combined as Σz/√T, or by Fisher's method"
    )
    calibration_fpr: float = Field(
        0.05, gt=0.0, lt=1.0, description="threshold: this quantile of the pool's scores"
    )


def combined(z: list[np.ndarray], how: str) -> np.ndarray:
    """One score per record from its per-round z statistics: Stouffer's Σz/√T, or the
    −log p-value of Fisher's −2Σlog p (χ² with 2T degrees of freedom)."""
    stacked = np.stack(z)
    if how == "stouffer":
        return stacked.sum(0) / np.sqrt(len(z))
    return -chi2.logsf(-2.0 * norm.logsf(stacked).sum(0), 2 * len(z))


def windowed(messages: list[Message], window: int | None, what: str) -> list[Message]:
    """The messages of the last ``window`` rounds, refused if any of them lost its payload
    (the transcript kept only some rounds)."""
    rounds = sorted({m.round for m in messages})
    chosen = set(rounds if window is None else rounds[-window:])
    kept = [m for m in messages if m.round in chosen]
    stripped = sorted({m.round for m in kept if m.payload is None})
    if stripped:
        held = sorted({m.round for m in kept if m.payload is not None})
        raise NotApplicableError(
            f"{NAME}: needs {what} of every round it reads; the transcript kept the payloads "
            f"of rounds {held or 'none'} only ({KEEP_ALL})"
        )
    return kept


def margins(
    spec: ModelSpec, state: State, knowledge: BackgroundKnowledge, records: list, hops: int
) -> np.ndarray:
    """True-label logit margins of the candidates, then the auxiliary pool, under ``state``."""
    api = rebuilt_api(spec, state, knowledge, NAME)
    return np.concatenate(
        [true_label_logit_margin(query(api, r, hops), r.labels) for r in records if r.ids.size]
    )


def server_scores(
    view: ServerView, knowledge: BackgroundKnowledge, records: list, cfg: AllRoundsConfig
) -> dict[str, np.ndarray]:
    """Client name → its combined FedMIA statistic per record (candidates, then pool)."""
    uploads = [m for m in view.received if m.kind == MODEL_WEIGHTS]
    reason = sealed(view.received)
    if not uploads and reason is not None:
        raise NotApplicableError(f"{NAME}: {reason}")
    if not uploads:
        raise NotApplicableError(f"{NAME}: the server received no model weights")
    kept = windowed(uploads, cfg.window, "every client's upload")
    if cfg.signal == "gradient":
        return server_gradient_scores(view, knowledge, records, kept, cfg)
    by_round: dict[int, dict[str, np.ndarray]] = defaultdict(dict)
    for m in kept:
        by_round[m.round][m.sender] = margins(view.spec, m.payload, knowledge, records, cfg.hops)
    z: dict[str, list[np.ndarray]] = defaultdict(list)
    if cfg.reference == "start":
        starts = {
            r: margins(view.spec, state, knowledge, records, cfg.hops)
            for r, state in sent_models(view, knowledge, set(by_round)).items()
        }
        for r, stats in by_round.items():
            for name, value in stats.items():
                z[name].append(moved(value - starts[r], knowledge.aux_ids.size))
        return {name: combined(values, cfg.combine) for name, values in sorted(z.items())}
    for stats in by_round.values():
        for name, value in others_test(stats, cfg.variance).items():
            z[name].append(value)
    if not z:
        raise NotApplicableError(
            f"{NAME}: needs rounds where at least three clients uploaded (two others to fit "
            "the non-member distribution)"
        )
    return {name: combined(values, cfg.combine) for name, values in sorted(z.items())}


def server_gradient_scores(
    view: ServerView,
    knowledge: BackgroundKnowledge,
    records: list,
    uploads: list[Message],
    cfg: AllRoundsConfig,
) -> dict[str, np.ndarray]:
    """Client name → its combined gradient-cosine statistic per record (candidates, then
    pool): each upload's update against the global model it started from."""
    starts = sent_models(view, knowledge, {m.round for m in uploads})
    everyone = union(*records)
    forwards = record_forwards(knowledge, everyone, cfg.hops)
    pool = knowledge.aux_ids.size
    z: dict[str, list[np.ndarray]] = defaultdict(list)
    for m in uploads:
        cos = update_cosines(view.spec, m.payload, starts[m.round], forwards, everyone.labels)
        z[m.sender].append(moved(cos, pool))
    return {name: combined(values, cfg.combine) for name, values in sorted(z.items())}


def sent_models(
    view: ServerView, knowledge: BackgroundKnowledge, rounds: set[int]
) -> dict[int, State]:
    """Round → the global model the server sent that round (the one every upload of the
    round started from)."""
    if knowledge.aux_ids.size < 2:
        raise NotApplicableError(
            f"{NAME}: reading uploads against their start calibrates on the auxiliary pool"
        )
    sent = [m for m in view.sent if m.kind == MODEL_WEIGHTS and m.round in rounds]
    missing = sorted(set(rounds) - {m.round for m in sent})
    if missing:
        raise NotApplicableError(
            f"{NAME}: reading uploads against their start (reference: start, signal: "
            f"gradient) needs the global model the server sent in rounds "
            f"{missing} (the uploads' start; under secure aggregation the server sends none)"
        )
    first: dict[int, State] = {}
    for m in windowed(sent, None, "the global model"):
        first.setdefault(m.round, m.payload)  # one snapshot, sent to every client of the round
    return first


def moved(step: np.ndarray, pool: int) -> np.ndarray:
    """A round's margin moves standardised by the auxiliary pool's (the last ``pool`` entries):
    members move more than known non-members."""
    ref = step[-pool:]
    return (step - ref.mean()) / (ref.std(ddof=1) + 1e-12)


def others_test(stats: dict[str, np.ndarray], variance: str) -> dict[str, np.ndarray]:
    """Each uploader's z statistic against the Gaussian of the other uploaders' margins of
    the same round (none when fewer than two others)."""
    names = sorted(stats)
    s = np.stack([stats[n] for n in names])
    if len(names) < 3:
        return {}
    out = {}
    for i, name in enumerate(names):
        others = np.delete(s, i, axis=0)
        var = others.var(0, ddof=1)
        if variance == "pooled":
            var = np.full_like(var, var.mean())
        scale = np.sqrt(var * (1.0 + 1.0 / others.shape[0])) + 1e-12
        out[name] = (s[i] - others.mean(0)) / scale
    return out


def client_models(view: ClientView, knowledge: BackgroundKnowledge, cfg: AllRoundsConfig):
    """The global models the client was sent, in round order: in the clear, or, under FedAvg's
    secure aggregation, the first in the clear and then each round's decrypted aggregate
    applied to the model before it (the aggregation rule is public: the weighted mean, or
    under DP-FedAvg the sum over the expected number of clients)."""
    sent = [m for m in view.received if m.sender == SERVER and m.kind == MODEL_WEIGHTS]
    encrypted = [m for m in view.received if m.sender == SERVER and m.kind == CIPHERTEXT]
    if not encrypted:
        if not sent:
            raise NotApplicableError(f"{NAME}: the client was sent no global models")
        last = None if cfg.window is None else cfg.window + 1  # a round's two ends
        return [m.payload for m in windowed(sent, last, "the global model")]
    recipe = knowledge.recipe
    if recipe.target != "fedavg" or not sent or view.keys is None:
        raise NotApplicableError(
            f"{NAME}: encrypted aggregates the client cannot turn into models (FedAvg's "
            "secure aggregation, with the client's key, only)"
        )
    first = windowed(sent[:1], None, "the first global model")[0]
    aggregates = windowed(encrypted, None, "every round's encrypted aggregate")
    dp = any(d.name == "dp-fedavg" for d in recipe.defenses)
    expected = float(recipe.config.get("client_fraction", 1.0)) * recipe.num_clients
    states = [first.payload]
    for m in aggregates:
        total = torch.as_tensor(view.keys.decrypt(m.payload))
        states.append(apply_update(states[-1], aggregate_mean(total, dp, expected)))
    return states if cfg.window is None else states[-(cfg.window + 1) :]


def client_scores(
    view: ClientView, knowledge: BackgroundKnowledge, records: list, cfg: AllRoundsConfig
) -> np.ndarray:
    """Each round's margin improvement (or gradient cosine with the round's update),
    standardised by the pool's that round, combined."""
    pool = knowledge.aux_ids.size
    if pool < 2:
        raise NotApplicableError(f"{NAME}: the client calibrates on the auxiliary pool")
    states = client_models(view, knowledge, cfg)
    if len(states) < 2:
        raise NotApplicableError(f"{NAME}: needs at least two global models (one round)")
    if cfg.signal == "gradient":
        everyone = union(*records)
        forwards = record_forwards(knowledge, everyone, cfg.hops)
        steps = [
            update_cosines(view.spec, after, before, forwards, everyone.labels)
            for before, after in zip(states[:-1], states[1:], strict=True)
        ]
    else:
        m = np.stack([margins(view.spec, s, knowledge, records, cfg.hops) for s in states])
        steps = list(np.diff(m, axis=0))
    return combined([moved(step, pool) for step in steps], cfg.combine)


class AllRoundsAttack:
    name = NAME
    family = "membership"
    threat = ThreatModel(
        sees="every client's upload of every round (server); the global models of every round "
        "(client, decrypting them under secure aggregation)",
        knows="the architecture, the candidates' features and labels (FedMIA's background), the "
        "population graph's edges where hops > 0, the auxiliary pool (known non-members: the "
        "client's reference and the threshold)",
    )
    Config = AllRoundsConfig

    def run(self, inp: AttackInput, config: AllRoundsConfig, seed: int) -> AttackOutput:
        cands, aux = inp.candidates, inp.knowledge.aux
        assert isinstance(cands, Candidates)
        n, records = cands.ids.size, [cands, aux]
        view = inp.view
        if isinstance(view, ServerView):
            per_model = server_scores(view, inp.knowledge, records, config)
        elif isinstance(view, ClientView):
            per_model = {"global": client_scores(view, inp.knowledge, records, config)}
        else:
            raise NotApplicableError(f"{NAME}: needs the server's or a client's view")
        out = per_model_output({k: v[:n] for k, v in per_model.items()})
        if not aux.ids.size:
            return out
        calib = np.max([v[n:] for v in per_model.values()], axis=0)
        return AttackOutput(
            out.scores, float(np.quantile(calib, 1.0 - config.calibration_fpr)), out.details
        )


ATTACKS.register(NAME)(AllRoundsAttack())
