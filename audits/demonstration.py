"""The audit failing on purpose: every DP defense at a setting whose claimed ε (about 0.1 to
2.5) canaries can reach, run correctly and deliberately broken (noise 10× smaller than the
ledger says, clipping off). The tests and ``python -m audits.demonstration`` (the table in
docs/accounting.md) both play these."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accountants import PrivacyLedger
from audits import CanaryAudit, Context, audit_run
from defenses import aggregation_perturbation as ap
from defenses import dp_fedavg, dp_sgd, gaussian_upload, metric_dp
from defenses.base import AppliedDefense

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


def _fedavg(mode: str, sigma: float) -> Case:
    cfg = dp_fedavg.DPFedAvgConfig(clip=1.0, noise_multiplier=sigma, mode=mode)
    ledger = PrivacyLedger(dp_fedavg.ledger_events(0.2, cfg, 10, 2.0, False))
    return Case("dp-fedavg", cfg, ledger, target={"client_fraction": 0.2, "rounds": 10})


def _dp_sgd(group: int) -> Case:
    cfg = dp_sgd.DPSGDConfig(clip=1.0, noise_multiplier=3.0 * group, sample_rate=0.1)
    return Case("dp-sgd", cfg, PrivacyLedger((dp_sgd.ledger_event(cfg, 50, group=group),)))


def _upload() -> Case:
    cfg = gaussian_upload.GaussianUploadConfig(clip=1.0, noise_multiplier=5.0)
    return Case("gaussian-upload", cfg, PrivacyLedger(gaussian_upload.ledger_events(cfg, 3)))


def _ap(level: str) -> Case:
    cfg = ap.APConfig(noise_multiplier=6.0 if level == "edge" else 4.0, level=level, max_degree=4)
    return Case("aggregation-perturbation", cfg, PrivacyLedger(ap.ledger_events(cfg, 2)))


def _metric() -> Case:
    cfg = metric_dp.MetricDPConfig(sigma0=1.2)
    return Case("metric-dp", cfg, PrivacyLedger((metric_dp.ledger_event(cfg),)), 0.5)


CASES: dict[str, Callable[[], Case]] = {
    "dp-fedavg central, q 0.2, 10 rounds, σ 3": lambda: _fedavg("central", 3.0),
    "dp-fedavg local, q 0.2, 10 rounds, σ 15": lambda: _fedavg("local", 15.0),
    "dp-sgd, q 0.1, 50 steps, σ 3": lambda: _dp_sgd(1),
    "dp-sgd group of 2, q 0.1, 50 steps, σ 6": lambda: _dp_sgd(2),
    "gaussian-upload, 3 uploads, σ 5": _upload,
    "aggregation-perturbation edge, 2 hops, σ 6": lambda: _ap("edge"),
    "aggregation-perturbation node (D 4), 2 hops, σ 4": lambda: _ap("node"),
    "metric-dp, 1 release, σ0 1.2, ρ 0.5": _metric,
}


def demonstrate(
    name: str, broken: bool, canaries: int = 500, dimension: int = 2000, seed: int = 0
) -> list[CanaryAudit]:
    case = CASES[name]()
    context = Context(case.ledger, {case.defense: case.config}, dimension, case.rho, case.target)
    defense = AppliedDefense(case.defense, "upload", case.config)
    return audit_run(context, [defense], DELTA, canaries, seed, broken)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--dimension", type=int, default=10_000)
    args = parser.parse_args()
    print("| setting | adversaries | claimed ε | bound, correct | bound, broken | broken caught |")
    print("|---|---|---|---|---|---|")
    for name in CASES:
        correct = demonstrate(name, False, args.canaries, args.dimension)
        broken = demonstrate(name, True, args.canaries, args.dimension)
        for ok, bad in zip(correct, broken, strict=True):
            print(
                f"| {name} | {'/'.join(ok.adversaries)} | {ok.claimed:.3f} | "
                f"{ok.lower_bound:.3f} | {bad.lower_bound:.3f} | "
                f"{'yes' if not bad.holds else 'NO'} |"
            )


if __name__ == "__main__":
    main()
