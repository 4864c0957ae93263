"""ε for 10,000 DP-SGD configurations: our vectorised accountant vs a Python loop over
Opacus's ``compute_rdp`` + ``get_privacy_spent``, both on Opacus's orders (so the numbers must
agree). The loop is what a careful user writes: RDP composes linearly in the steps, so it
computes each (q, σ) pair's one-step curve once and scales it by each configuration's steps.

Two grids of the same size:
  sweep      q (10) × σ (20) × steps (50): what a user sweeping a configuration asks for;
             200 curves serve all 10,000 rows, on both sides.
  scattered  10,000 random (q, σ, steps): every (q, σ) pair distinct, the worst case.

Ours runs its blocks on threads (numpy releases the GIL), the loop on one. Run it on an idle
machine: the load averages are printed before and after.

    python benchmarks/accountant.py [--n 10000]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
from opacus.accountants.analysis import rdp as opacus_rdp

from fgl_workbench.accountants import subsampled_gaussian_grid
from fgl_workbench.accountants.analysis.orders import OPACUS_ORDERS

DELTA = 1e-5


def grids(n: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    steps_per = max(1, n // 200)
    q, s, t = np.meshgrid(
        np.logspace(-4, -1, 10),
        np.linspace(0.5, 5, 20),
        np.linspace(100, 10_000, steps_per).round(),
        indexing="ij",
    )
    rng = np.random.default_rng(0)
    scattered = (
        10 ** rng.uniform(-4, -1, n),
        rng.uniform(0.5, 5, n),
        rng.integers(100, 10_000, n).astype(float),
    )
    return {"sweep": (q.ravel(), s.ravel(), t.ravel()), "scattered": scattered}


def opacus_loop(q: np.ndarray, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Opacus's ε per configuration, each (q, σ) curve computed once (Opacus's own
    ``compute_rdp`` multiplies its one-step curve by the steps, so this is the same number)."""
    out = np.empty(q.size)
    curves: dict[tuple[float, float], np.ndarray] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(q.size):
            pair = (q[i], s[i])
            if pair not in curves:
                curves[pair] = opacus_rdp.compute_rdp(
                    q=q[i], noise_multiplier=s[i], steps=1, orders=OPACUS_ORDERS
                )
            r = curves[pair] * int(t[i])
            out[i] = opacus_rdp.get_privacy_spent(orders=OPACUS_ORDERS, rdp=r, delta=DELTA)[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print(f"{'grid':<11}{'configs':>8}{'ours s':>10}{'opacus s':>11}{'ratio':>9}{'max |Δε|/ε':>13}")
    for name, (q, s, t) in grids(args.n).items():
        start = time.perf_counter()
        ours, _ = subsampled_gaussian_grid(q, s, t, DELTA, orders="opacus")
        mine = time.perf_counter() - start
        start = time.perf_counter()
        ref = opacus_loop(q, s, t)
        theirs = time.perf_counter() - start
        rel = np.max(np.abs(ours - ref) / np.abs(ref))
        print(f"{name:<11}{q.size:>8}{mine:>10.2f}{theirs:>11.1f}{theirs / mine:>9.1f}{rel:>13.1e}")
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
