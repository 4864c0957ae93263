"""The audit is valid: on correct mechanisms whose claim is exact (the Gaussian mechanism of
metric-DP and of aggregation perturbation), the bound stays at or under the claim, and the
claim's profile is not rejected, in at least 95 % of 200 repetitions of a cheap game."""

from __future__ import annotations

import pytest

from fgl_workbench.audits.demonstration import CASES, demonstrate

CHEAP = [n for n in CASES if n.startswith(("metric-dp, 1", "aggregation-perturbation edge"))]
REPETITIONS = 200


@pytest.mark.parametrize("name", CHEAP)
def test_a_correct_mechanism_holds_in_95_percent_of_repetitions(name):
    held = sum(
        all(a.holds for a in demonstrate(name, canaries=100, seed=seed))
        for seed in range(REPETITIONS)
    )
    assert held >= 0.95 * REPETITIONS, f"{held}/{REPETITIONS}"
