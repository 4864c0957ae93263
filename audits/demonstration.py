"""The audit failing on purpose: every DP defense at a setting whose claimed ε (about 1 to
2.5) canaries can reach, run correctly and with each break of ``audits.breaks`` that applies
to it patched into its code. The tests and ``python -m fgl_workbench.audits.demonstration``
(the table in docs/accounting.md) both play these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fgl_workbench.accountants import MetricGaussian, PrivacyLedger
from fgl_workbench.audits import CanaryAudit, Context, audit_run
from fgl_workbench.audits.breaks import BREAKS
from fgl_workbench.audits.canary import NULLS
from fgl_workbench.defenses import aggregation_perturbation as ap
from fgl_workbench.defenses import dp_fedavg, dp_sgd, gaussian_upload, metric_dp
from fgl_workbench.defenses.base import AppliedDefense

DELTA = 1e-5


@dataclass(frozen=True)
class Case:
    """A defense's config and the ledger a run with it writes (ρ for metric-DP; the
    target's sampling rate and rounds for DP-FedAvg)."""

    defense: str
    config: Any
    ledger: PrivacyLedger
    rho: float | None = None
    target: dict[str, Any] = field(default_factory=dict)
    breaks: tuple[str, ...] = tuple(BREAKS)  # the breaks that apply to it
    canaries: int = 500  # enough for the audit to catch every break that applies


def _fedavg(mode: str, sigma: float) -> Case:
    cfg = dp_fedavg.DPFedAvgConfig(clip=1.0, noise_multiplier=sigma, mode=mode)
    ledger = PrivacyLedger(dp_fedavg.ledger_events(0.2, cfg, 10, 2.0, False))
    target = {"client_fraction": 0.2, "rounds": 10}
    local = mode == "local"
    return Case(
        "dp-fedavg",
        cfg,
        ledger,
        target=target,
        breaks=_but(not local),
        canaries=2000,
    )


THIRD = "noise σ/3"
LOOSE = "clipping ×4"
SAMPLING = "amplification without sampling"
REUSED = "same noise every round"
FLIPPED = "noise flipping sign every round"
HALF = "noise on half of the rounds"


def _but(sampled: bool, *others: str) -> tuple[str, ...]:
    """Every break but the ones that do not apply: ``others``, and sampling's where the
    claim has no amplification by sampling to lose."""
    gone = set(others) | (set() if sampled else {SAMPLING})
    return tuple(b for b in BREAKS if b not in gone)


def _dp_sgd(group: int) -> Case:
    cfg = dp_sgd.DPSGDConfig(clip=1.0, noise_multiplier=3.0 * group, sample_rate=0.1)
    ledger = PrivacyLedger((dp_sgd.ledger_event(cfg, 50, group=group),))
    # a group's bound is loose (every record of the group in every batch it joins, σ/g): a
    # third of the noise leaves the real ε within 1.7× of the claim, caught from 8000
    # canaries (``benchmarks/audit_teeth.py --group-only``), and a clip four times too
    # loose nearer still
    breaks = _but(True, *(() if group == 1 else (THIRD, LOOSE)))
    return Case("dp-sgd", cfg, ledger, breaks=breaks, canaries=2000)


def _upload() -> Case:
    cfg = gaussian_upload.GaussianUploadConfig(clip=1.0, noise_multiplier=5.0)
    ledger = PrivacyLedger(gaussian_upload.ledger_events(cfg, 3))
    return Case("gaussian-upload", cfg, ledger, breaks=_but(False), canaries=2000)


def _ap(level: str) -> Case:
    cfg = ap.APConfig(noise_multiplier=6.0 if level == "edge" else 4.0, level=level, max_degree=4)
    ledger = PrivacyLedger(ap.ledger_events(cfg, 2))
    # a node's rows reach the adversary through a half or a quarter of its out-edges (the
    # rest are cut by the degree bound the canary must exceed): more canaries
    canaries = 16000 if level == "node" else 4000
    return Case(
        "aggregation-perturbation",
        cfg,
        ledger,
        breaks=_but(False, REUSED, FLIPPED),
        canaries=canaries,
    )


def _metric(releases: int, sigma0: float) -> Case:
    cfg = metric_dp.MetricDPConfig(sigma0=sigma0)
    event = MetricGaussian(sigma0, releases, scope=metric_dp.METRIC_SCOPE)
    one_shot = (REUSED, FLIPPED, HALF) if releases == 1 else ()
    ledger = PrivacyLedger((event,))
    return Case("metric-dp", cfg, ledger, 0.5, breaks=_but(False, *one_shot), canaries=2000)


CASES: dict[str, Callable[[], Case]] = {
    "dp-fedavg central, q 0.2, 10 rounds, σ 3": lambda: _fedavg("central", 3.0),
    "dp-fedavg local, q 0.2, 10 rounds, σ 15": lambda: _fedavg("local", 15.0),
    "dp-sgd, q 0.1, 50 steps, σ 3": lambda: _dp_sgd(1),
    "dp-sgd group of 2, q 0.1, 50 steps, σ 6": lambda: _dp_sgd(2),
    "gaussian-upload, 3 uploads, σ 5": _upload,
    "aggregation-perturbation edge, 2 hops, σ 6": lambda: _ap("edge"),
    "aggregation-perturbation node (D 4), 2 hops, σ 4": lambda: _ap("node"),
    "metric-dp, 1 release, σ0 1.2, ρ 0.5": lambda: _metric(1, 1.2),
    "metric-dp, 4 releases, σ0 2.4, ρ 0.5": lambda: _metric(4, 2.4),
}


def demonstrate(
    name: str,
    broken: str | None = None,
    canaries: int = 500,
    dimension: int | None = None,
    seed: int = 0,
) -> list[CanaryAudit]:
    """The case's audit, its mechanism correct or with the break ``broken`` patched in, on a
    released vector of ``dimension`` entries (by default one per canary and null direction:
    the canaries are then independent coordinates)."""
    case = CASES[name]()
    dimension = canaries + NULLS if dimension is None else dimension
    context = Context(case.ledger, {case.defense: case.config}, dimension, case.rho, case.target)
    defense = AppliedDefense(case.defense, "upload", case.config)
    if broken is None:
        return audit_run(context, [defense], DELTA, canaries, seed)
    with BREAKS[broken]():
        return audit_run(context, [defense], DELTA, canaries, seed)


def main() -> None:
    """The table of docs/accounting.md: each case at its canary count."""
    print(
        "| setting | adversaries | claimed ε | bound, correct | "
        + " | ".join(f"bound, {b}" for b in BREAKS)
        + " | ceiling | m | seconds |"
    )
    print("|---" * (len(BREAKS) + 7) + "|")
    for name, make in CASES.items():
        case = make()
        correct = demonstrate(name, None, case.canaries)
        per_break = {b: demonstrate(name, b, case.canaries) for b in case.breaks}
        for k, ok in enumerate(correct):
            cells = [_caught(per_break[b][k]) if b in per_break else "n/a" for b in BREAKS]
            print(
                f"| {name} | {'/'.join(ok.adversaries)} | {ok.claimed:.3f} | "
                f"{ok.lower_bound:.3f} | {' | '.join(cells)} | {ok.ceiling:.2f} | "
                f"{ok.bounds.canaries} | {ok.seconds:.1f} |",
                flush=True,
            )


def _caught(audit: CanaryAudit) -> str:
    how = "profile rejected" if audit.rejected else "bound above"
    return f"{audit.lower_bound:.3f} ({how if not audit.holds else 'MISSED'})"


if __name__ == "__main__":
    main()
