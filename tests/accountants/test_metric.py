"""CE-FedGNN (Metric-DP) Tables 6 and 7: ε(ρ) for the composed Gaussian on normalised
embeddings, δ = 1e-4, Opacus's order grid, no refinement. R′ = 200 (Table 6, HI-Small) and
100 (Table 7, HI-Medium) are not printed in the paper: they are inferred from the tables
(../shared/methods/ce-fedgnn.md §2.6), and no neighbouring integer matches a single cell."""

import subprocess
import sys

import numpy as np
import pytest

from fgl_workbench.accountants import metric_epsilon, rho_knn_percentile

SIGMA0 = [0.3, 0.5, 0.7, 1, 2, 3, 5]
TABLE6 = {  # ρ_q: ε per σ0 (HI-Small, R′ = 200)
    0.0533: [12.881, 6.815, 4.556, 3.005, 1.367, 0.869, 0.492],
    0.1466: [51.794, 25.017, 15.941, 10.097, 4.356, 2.719, 1.522],
    0.1845: [73.245, 34.476, 21.641, 13.524, 5.724, 3.547, 1.973],
    0.2793: [141.039, 63.316, 38.576, 23.426, 9.501, 5.787, 3.173],
    0.8913: [1059.705, 424.668, 237.899, 131.634, 45.275, 25.478, 12.936],
}
TABLE7 = {  # HI-Medium, R′ = 100
    0.0339: [4.823, 2.660, 1.813, 1.214, 0.561, 0.358, 0.203],
    0.1767: [41.001, 20.150, 12.957, 8.276, 3.613, 2.265, 1.273],
    0.2143: [54.408, 26.194, 16.652, 10.523, 4.530, 2.825, 1.580],
    0.2988: [90.373, 41.868, 26.045, 16.128, 6.741, 4.156, 2.303],
    0.7724: [441.083, 183.477, 106.161, 61.256, 22.713, 13.291, 7.020],
}
CELLS = [
    (rho, s, want, releases)
    for table, releases in ((TABLE6, 200), (TABLE7, 100))
    for rho, row in table.items()
    for s, want in zip(SIGMA0, row, strict=True)
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("rho", "sigma0", "want", "releases"), CELLS)
def test_tables_6_and_7(rho, sigma0, want, releases):
    got = metric_epsilon(sigma0, rho, releases, 1e-4, orders="opacus", refine=False).epsilon
    assert round(got, 3) == pytest.approx(want, abs=1e-9)


def test_all_70_cells_are_listed():
    assert len(CELLS) == 70


def test_rho_two_is_standard_dp():
    """ρ = 2 (the unit sphere's diameter) gives the no-subsampling Gaussian's standard DP."""
    want = [4977.641, 1848.752, 986.712, 523.348, 158.360, 83.154, 38.712]
    got = [
        round(metric_epsilon(s, 2.0, 200, 1e-4, orders="opacus", refine=False).epsilon, 3)
        for s in SIGMA0
    ]
    assert got == want


def test_rho_knn_on_a_circle():
    """n evenly spaced points on the unit circle: the k-th nearest neighbour is ⌈k/2⌉ steps
    away, at chord length 2 sin(π ⌈k/2⌉ / n), for every point and so every percentile."""
    n, k = 400, 50
    t = 2 * np.pi * np.arange(n) / n
    x = np.stack([np.cos(t), np.sin(t)], 1) * 7.0  # scale is removed by normalisation
    want = 2 * np.sin(np.pi * 25 / n)
    for q in (0, 50, 90, 100):
        assert rho_knn_percentile(x, k=k, q=q) == pytest.approx(want, rel=1e-9)


def test_rho_percentile_reflects_the_spread():
    rng = np.random.default_rng(0)
    tight = rng.normal(size=(300, 8)) * 0.01 + np.eye(8)[0]
    loose = rng.normal(size=(300, 8))
    x = np.concatenate([tight, loose])
    low, high = rho_knn_percentile(x, k=10, q=25), rho_knn_percentile(x, k=10, q=90)
    assert low < 0.05 < high
    with pytest.raises(ValueError, match="more than k"):
        rho_knn_percentile(x[:5], k=10)


def test_kth_neighbour_distances_equal_scikit_learns():
    from sklearn.neighbors import NearestNeighbors

    from fgl_workbench.accountants.metric import kth_neighbour_distance

    x = np.random.default_rng(0).normal(size=(1500, 24))  # two blocks of rows
    ours = kth_neighbour_distance(x, 50)
    theirs = NearestNeighbors(n_neighbors=51).fit(x).kneighbors(x)[0][:, 50]
    np.testing.assert_allclose(ours, theirs, atol=1e-9)


def test_importing_the_accountant_imports_neither_torch_nor_scikit_learn():
    """`fgl-workbench epsilon` must start fast: the accountant is numpy and scipy only."""
    code = (
        "import sys, accountants; "
        "print(sorted(m for m in ('torch', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
