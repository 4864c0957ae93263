"""The canary audit's teeth, measured: for every DP defense of ``audits.demonstration``, how
often the correct mechanism holds over repeated cheap games (the audit's validity: at least
95 % is required), how often noise σ/3 is caught over 20 seeds at the setting's canary count,
the fewest canaries (of 500, 1000, ..., 16000) at which noise σ/2 is caught, and the table of
docs/accounting.md (claimed ε, bound on the correct mechanism, the bound under each break,
ceiling, canaries, seconds).

    python benchmarks/audit_teeth.py [--repetitions 200] [--skip-table]
"""

from __future__ import annotations

import argparse
import time

from fgl_workbench.audits.breaks import scaled_noise
from fgl_workbench.audits.demonstration import CASES, demonstrate
from fgl_workbench.audits.demonstration import main as table

COUNTS = (500, 1000, 2000, 4000, 8000, 16000)


def validity(name: str, repetitions: int) -> tuple[int, float]:
    """(repetitions that held, seconds each) at 200 canaries in 300 dimensions."""
    start = time.perf_counter()
    held = sum(
        all(a.holds for a in demonstrate(name, canaries=200, dimension=300, seed=s))
        for s in range(repetitions)
    )
    return held, (time.perf_counter() - start) / repetitions


def third_noise_caught(name: str, seeds: int = 20) -> int:
    """Of ``seeds`` games at the setting's canary count, how many catch noise σ/3."""
    m = CASES[name]().canaries
    caught = 0
    for seed in range(seeds):
        with scaled_noise(1 / 3):
            caught += not all(a.holds for a in demonstrate(name, canaries=m, seed=seed))
    return caught


def half_noise_caught_at(name: str) -> tuple[int | None, float]:
    """The fewest canaries of ``COUNTS`` that catch noise σ/2, and the seconds that took."""
    for m in COUNTS:
        start = time.perf_counter()
        with scaled_noise(0.5):
            caught = not all(a.holds for a in demonstrate(name, canaries=m))
        if caught:
            return m, time.perf_counter() - start
    return None, 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--skip-table", action="store_true")
    args = parser.parse_args()
    print("| setting | correct holds | s/game | σ/3 caught, 20 seeds (m) | σ/2 caught at m | s |")
    print("|---|---|---|---|---|---|")
    for name, make in CASES.items():
        held, each = validity(name, args.repetitions)
        third = third_noise_caught(name) if "noise σ/3" in make().breaks else None
        m, seconds = half_noise_caught_at(name)
        found = "not at 16000" if m is None else str(m)
        thirds = "n/a" if third is None else f"{third}/20 ({make().canaries})"
        print(
            f"| {name} | {held}/{args.repetitions} ({held / args.repetitions:.1%}) | "
            f"{each:.2f} | {thirds} | {found} | {seconds:.1f} |",
            flush=True,
        )
    if not args.skip_table:
        print()
        table()


if __name__ == "__main__":
    main()
