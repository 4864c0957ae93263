"""ε for 10,000 DP-SGD configurations: our vectorised accountant vs a loop over Opacus's
``compute_rdp`` + ``get_privacy_spent``, both on Opacus's orders (so the numbers must agree).

Two grids of the same size:
  sweep      q (10) × σ (20) × steps (50): what a user sweeping a configuration asks for;
             RDP depends on (q, σ) only, so 200 curves serve all 10,000 rows.
  scattered  10,000 random (q, σ, steps): every (q, σ) pair distinct, the worst case.

    python benchmarks/accountant.py [--n 10000]
"""

from __future__ import annotations

import argparse
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
    out = np.empty(q.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(q.size):
            r = opacus_rdp.compute_rdp(
                q=q[i], noise_multiplier=s[i], steps=int(t[i]), orders=OPACUS_ORDERS
            )
            out[i] = opacus_rdp.get_privacy_spent(orders=OPACUS_ORDERS, rdp=r, delta=DELTA)[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
