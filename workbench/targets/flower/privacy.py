"""Flower's DP wrappers in the privacy ledger, scoped by adversary, and Flower's own ε beside.

**Central, fixed clipping** (``DifferentialPrivacyServerSideFixedClipping``, or
``...ClientSideFixedClipping`` with ``fixedclipping_mod``): each of the m sampled updates is
clipped to L2 norm C, FedAvg averages them with equal weights (the wrapper's accounted path
requires equal weights; the engine sends a constant one), and the server adds Gaussian noise
of std σ·C/m to the mean. Flower draws a *fixed* number m of the n clients per round, without
replacement, so the Poisson analysis does not apply, and its mean divides by the m replies
received: adding a client to a full sample displaces another, which moves the sum by up to
2C. The relation under which σ·C/m noise on a C/m move holds is *zero-out*: one client's
data replaced by none, so it returns the model it received (update 0; Kairouz et al. 2021).
A client holding no training record is that neighbour itself: it sends the model it
received with the same weight 1 (a weight of 0 would move the denominator with the data, and
the wrappers refuse it), its zero update clipped as it is (``zero_safe_clipping``).
Under zero-out each round is one Gaussian mechanism of noise multiplier σ; we claim no
amplification from the fixed-size draw (sound whatever m; exact when every client takes part),
so the guarantee does not depend on who sees the sample. It holds for other clients and a
querier of the released model. The server adds the noise and receives the updates before it
(server-side clipping: unclipped): no guarantee against it. Replace-one is two zero-outs, so
its ε is this ledger's at group size 2 (σ/2).

**Local** (``LocalDpMod`` on the train handler): each update is clipped to C and noised with
std s = sensitivity·√(2 ln(1.25/δ))/ε on the client; the engine sets sensitivity = C and
chooses (ε, δ) so that s = σ·C. A replaced client's clipped update moves by up to 2C, which
the mod's own (ε, δ) ignores, and the classic formula it uses holds only for ε ≤ 1. The ledger
is the built-in local DP-FedAvg's: one Gaussian of std s at sensitivity 2C per upload the
busiest client made, against everyone.

**Under SecAgg+** (``secure_aggregation: secaggplus``; Flower's ``SecAggPlusWorkflow``): the
server unmasks only the round's sum. *Central* runs only with client-side clipping
(``fixedclipping_mod`` inside ``secaggplus_mod``): the server cannot clip what it never sees.
It unmasks the sum of the clipped updates and then adds the noise itself, so what it sees is
unnoised: still no guarantee against the server (masking hides each update, not the sum, and
the other clients' updates are no noise a DP bound may count on). For other clients and the
querier SecAgg+ changes the mechanism: each weighted model is clipped per coordinate to
±clipping_range (a contraction: it moves no contribution by more than its clipped update) and
stochastically rounded to the quantisation grid, which moves a contribution by less than a
quantum q per coordinate, so a zero-out moves the sum by less than C + 2q√d (d parameters);
the server's noise σ·C then stands for a noise multiplier σ·C/(C + 2q√d), stated at that
sensitivity (q = 2·clipping_range/(quantization_range·w) at the weight fraction w of the
constant weight 1 in max_weight). *Local*: each upload is noised by LocalDpMod, then clipped,
quantised and masked by SecAgg+: post-processing, so the per-upload guarantee holds against
everyone, the server included. The sum's larger noise (√m uploads' worth) is not claimed:
SecAgg+ clips and rounds each noisy upload before the sum, so the sum is no Gaussian
mechanism on the clean sum; the per-upload guarantee is sound and conservative.

**Metrics**: a client's training loss, evaluation loss and accuracy and example counts are
computed on its private data and sent to the server unnoised (Flower's accountant leaves them
out by its own docstring): no guarantee against the server while clients report them.

**Adaptive clipping** (``...AdaptiveClipping``): no finite bound. Flower 1.42's wrapper
updates the clip from the noisy clipped count *before* it noises the sum, so the noise is
σ_Δ·C_{t+1}/m on updates clipped at C_t: when the clip shrinks, the noise is smaller than the
sensitivity it is meant for, by a factor the count's Gaussian noise leaves unbounded. (It also
moves the clip away from its target, shrinking it when too many updates are clipped, and its
split of σ between updates and count holds only for add-or-remove with centred bits.) Every
party gets ∞ with the reason (``ADAPTIVE``).

**Flower's own ε**: its ``RdpAccountant`` (dp_accounting underneath) accepts only
add-or-remove with no amplification for the fixed-clipping wrappers, composes one Gaussian of
multiplier σ per aggregated round, and names no adversary. It is reported beside ours as
``flower_epsilon``: the same number as ours for other clients and the querier (zero-out), not
a bound against the server."""

from __future__ import annotations

import math
from typing import Any

from fgl_workbench.accountants import Gaussian, NoGuarantee, Scope
from fgl_workbench.defenses import dp_fedavg
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig

ZERO_OUT = "zero out one client: it returns the model it received"
REMOVE = (
    "remove one client: its update and its weight leave FedAvg's mean (a weight its data sets, "
    "as num_examples is, moves the mean up to twice as far as a zero-out)"
)
FLOWER_DELTA = 1e-5  # the δ the engine asks Flower's accountant and LocalDpMod for
ADAPTIVE = (
    "Flower's adaptive clipping noises each round's sum at the clip it has just updated, not "
    "the one it clipped the updates with: the noise can be smaller than the sensitivity by a "
    "factor nothing bounds"
)


SECAGG_SERVER = (
    "Flower central DP under SecAgg+: the server unmasks the round's sum of the clipped "
    "updates before it adds the noise itself, so the sum it sees is unnoised (masking hides "
    "each update, not the sum)"
)


def central_events(
    config: DPFedAvgConfig,
    rounds: int,
    per_round: int,
    num_clients: int,
    clipping: str,
    removal: bool = False,
    rounding: float | None = None,
) -> tuple[Gaussian, NoGuarantee]:
    """Fixed clipping with the server's noise: (other clients and the querier, the server).
    ``removal``: stated for removing a client with its weight, 2·C·w/Σw (σ/2): a user's app
    weighs by counts its clients' data set, unlike the workbench's weight-1 DP clients.
    ``rounding``: under SecAgg+, how far its quantisation can move a contribution beyond its
    clip (``secagg_rounding``), added to the sensitivity C."""
    relation = REMOVE if removal else ZERO_OUT
    sigma = config.noise_multiplier / (2 if removal else 1)
    note = (
        f"fixed-size sample of {per_round} of {num_clients} clients a round: no amplification"
        if per_round < num_clients
        else "every client takes part in every round"
    )
    sensitivity = 1.0
    if rounding is not None:
        sensitivity += rounding / config.clip
        note += (
            f"; SecAgg+'s stochastic rounding moves a contribution by < {rounding:.3g} beyond "
            "its clip C (sensitivity C + 2q√d)"
        )
    hidden = Gaussian(
        sigma, sensitivity, rounds, scope=Scope("client", relation, ("clients", "querier"), note)
    )
    if rounding is not None:
        why = SECAGG_SERVER
    elif clipping == "server":
        why = (
            "Flower central DP, server-side clipping: the server receives each raw update and "
            "adds the noise itself"
        )
    else:
        why = (
            "Flower central DP, client-side clipping: the server receives each clipped update "
            "before it adds the noise"
        )
    return hidden, NoGuarantee(why, Scope("client", relation, ("server",)))


def secagg_rounding(
    clipping_range: float, quantization_range: int, weight_fraction: float, num_params: int
) -> float:
    """2q√d: the most SecAgg+'s stochastic rounding moves a zero-out's contribution (in the
    model's units) beyond the clipped update, both roundings below a quantum
    q = 2·clipping_range/(quantization_range·w) per coordinate, where w is the weight's
    quantised fraction of max_weight, Flower's round(weight/max_weight · range)/range."""
    w = round(weight_fraction * quantization_range) / quantization_range
    if w <= 0:
        raise ValueError(
            "secaggplus.max_weight: the clients' weight quantises to 0 (max_weight is too large "
            "for quantization_range)"
        )
    quantum = 2 * clipping_range / (quantization_range * w)
    return 2 * quantum * math.sqrt(num_params)


def local_events(config: DPFedAvgConfig, busiest: int) -> tuple[Gaussian]:
    """LocalDpMod at std σ·C: the built-in local DP-FedAvg's ledger for ``busiest`` uploads."""
    return dp_fedavg.ledger_events(1.0, config, busiest, float(busiest), False)  # type: ignore[return-value]


def metrics_event(kinds: list[str]) -> NoGuarantee:
    """What clients report on their private data, unnoised, to the server."""
    return NoGuarantee(
        f"clients report {', '.join(kinds)} computed on their private data to the server "
        "unnoised (outside Flower's accountant too)",
        Scope("client", ZERO_OUT, ("server",)),
    )


def local_dp_mod_std(sensitivity: float, epsilon: float, delta: float) -> float:
    """LocalDpMod's noise std: the classic Gaussian mechanism's sensitivity·√(2 ln(1.25/δ))/ε
    (Dwork & Roth, Theorem A.1, which holds only for ε ≤ 1)."""
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def local_dp_mod_epsilon(config: DPFedAvgConfig) -> float:
    """The per-upload ε LocalDpMod is given so that its noise std is σ·C at sensitivity C
    and δ = ``FLOWER_DELTA``."""
    return local_dp_mod_std(1.0, 1.0, FLOWER_DELTA) / config.noise_multiplier


def zero_safe_clipping() -> None:
    """Flower's fixed clipping (``clip_inputs_inplace``, which every fixed-clipping wrapper
    and mod calls: FlatClip, scaling an update by min(1, C/‖u‖)) leaving a zero update as it
    is, where Flower's divides by its norm, 0, and raises: a client with no training record
    sends back the model it received. The same clip wherever ‖u‖ > 0, and ‖0‖ ≤ C: no
    sensitivity changes (the guard Flower's open PR #7631 proposes). Applied once per
    process, where the workbench's own clients train and its own server serves (the
    simulation's actors and the SuperNodes too); a process that only records a user's app
    runs Flower's code as shipped."""
    from flwr.supercore import differential_privacy as flower_dp

    clip = flower_dp.clip_inputs_inplace
    if getattr(clip, "zero_safe", False):
        return

    def clip_inputs_inplace(input_arrays: Any, clipping_norm: float) -> None:
        if flower_dp.get_norm(input_arrays) > 0:
            clip(input_arrays, clipping_norm)

    clip_inputs_inplace.zero_safe = True  # type: ignore[attr-defined]
    flower_dp.clip_inputs_inplace = clip_inputs_inplace


def flower_accountant(num_clients: int) -> Any:
    """Flower's RDP accountant as its fixed-clipping wrappers accept it."""
    from flwr.serverapp import (
        NeighboringRelation,
        PrivacyConfig,
        RdpAccountant,
        SamplingMethod,
    )

    return RdpAccountant(
        PrivacyConfig(
            target_delta=FLOWER_DELTA,
            population_size=num_clients,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
    )
