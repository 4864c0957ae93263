"""ε from Google's privacy-loss-distribution (PLD) accountant, beside our RDP ε.

RDP bounds ε through Rényi divergences and a conversion, which loses a little on every
composition; the PLD accountant composes the privacy-loss distributions themselves and is
tighter (often 10-25 % on DP-SGD). We keep RDP as the primary figure (it is ours, checked
against Opacus and dp_accounting's RDP) and report PLD beside it, labelled, for the events it
supports: Gaussian, subsampled Gaussian (Poisson, add/remove neighbours, as Opacus and our
RDP assume), Laplace and their compositions. Metric-DP events have no PLD form here.

dp_accounting's estimate is pessimistic (an upper bound on ε), so it is a valid guarantee,
not an approximation from below."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from fgl_workbench.accountants.events import Composed, Gaussian, Laplace, SubsampledGaussian
from fgl_workbench.accountants.ledger import PrivacyLedger

# dp_accounting's discretisation: finer is tighter and slower; 1e-4 moves ε by < 0.1 % on the
# configurations of tests/accountants/test_pld.py
VALUE_DISCRETIZATION = 1e-4
# beyond this many compositions of one event dp_accounting's discretised PLD takes minutes
# (10^7 steps: 10 s measured; 10^9: not finished in 10 min); RDP still answers
MAX_COMPOSITIONS = 10_000_000
# below this noise-to-sensitivity ratio the discretised privacy loss spans so many values that
# dp_accounting takes seconds to minutes and gigabytes (σ/Δ = 0.05: 17 s; 0.025: 43 s and
# 4.4 GB; 1e-3: asks for 76 GiB), while ε is already vacuous; RDP still answers
MIN_NOISE = 0.2


class PLDUnavailable(ValueError):
    """No PLD ε: an event without a PLD form (metric-DP, no-guarantee markers), or a
    configuration dp_accounting cannot discretise (e.g. σ = 1e-200)."""


def pld_epsilon(ledger: PrivacyLedger, delta: float) -> float:
    """ε at ``delta`` of the ledger's composed events by dp_accounting's PLD accountant.
    Raises ``PLDUnavailable`` when an event has no PLD form."""
    return float(_accounted(ledger, lambda accountant: accountant.get_epsilon(delta)))


def pld_deltas(ledger: PrivacyLedger, epsilons: Sequence[float]) -> list[float]:
    """δ(ε) at each of ``epsilons``: the ledger's privacy profile by the PLD accountant,
    composed once (``PLDUnavailable`` as ``pld_epsilon``)."""
    return _accounted(ledger, lambda a: [float(a.get_delta(float(e))) for e in epsilons])


def _accounted(ledger: PrivacyLedger, read: Callable[[Any], Any]) -> Any:
    """``read`` of dp_accounting's PLD accountant holding the ledger's events."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    if ledger.is_empty:
        raise ValueError("the ledger holds no events: nothing was made differentially private")
    accountant = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=VALUE_DISCRETIZATION,
    )
    many = [e for e in ledger.events if _compositions(e) > MAX_COMPOSITIONS]
    if many:
        raise PLDUnavailable(
            f"{type(many[0]).__name__}: more than {MAX_COMPOSITIONS:,} compositions, beyond "
            "what the PLD accountant computes in reasonable time"
        )
    events = [dp_event(e) for e in ledger.events]
    try:
        for event in events:
            accountant.compose(event)
        value = read(accountant)
    except (OverflowError, ValueError, FloatingPointError, MemoryError) as exc:
        raise PLDUnavailable(f"dp_accounting could not account this ledger ({exc!r})") from None
    return math.inf if value is None else value


def _compositions(event: object) -> int:
    count = getattr(event, "steps", None) or getattr(event, "count", 1)
    if isinstance(event, Composed):
        return count * max(_compositions(e) for e in event.events)
    return int(count)


def dp_event(event: object):
    """Our event as a dp_accounting ``DpEvent``."""
    import dp_accounting as dpa

    if isinstance(event, Gaussian) and not event.metric:
        noise = _enough_noise(event.sigma / event.sensitivity)
        return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(noise), event.count)
    if isinstance(event, SubsampledGaussian) and not event.metric:
        sampled = dpa.PoissonSampledDpEvent(
            event.q, dpa.GaussianDpEvent(_enough_noise(event.sigma))
        )
        return dpa.SelfComposedDpEvent(sampled, event.steps)
    if isinstance(event, Laplace) and not event.metric:
        noise = _enough_noise(event.b / event.sensitivity)
        return dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(noise), event.count)
    if isinstance(event, Composed) and not event.metric:
        inner = dpa.ComposedDpEvent([dp_event(e) for e in event.events])
        return dpa.SelfComposedDpEvent(inner, event.count)
    raise PLDUnavailable(f"{type(event).__name__}: no PLD form (metric-DP or not a mechanism)")


def _enough_noise(ratio: float) -> float:
    if ratio < MIN_NOISE:
        raise PLDUnavailable(
            f"noise {ratio:g} times the sensitivity, below {MIN_NOISE}: beyond what the PLD "
            "accountant discretises in reasonable time and memory"
        )
    return ratio
