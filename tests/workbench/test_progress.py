"""A cell that trains for minutes says where it is: round k of R and what it computed."""

import pytest

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.progress import listening_to_rounds, report_round, round_text
from fgl_workbench.targets import TARGETS


@pytest.mark.parametrize(
    ("target", "params", "total", "value"),
    [
        ("fedavg", {"rounds": 3}, 3, "val_accuracy"),
        ("centralized", {"epochs": 4}, 4, "val_accuracy"),
        ("gap", {"encoder_rounds": 3, "rounds": 2}, 2, "val_accuracy"),
    ],
)
def test_targets_report_every_round(small_csbm, target, params, total, value):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 3, seed=0))
    heard = []
    with listening_to_rounds(lambda k, n, v: heard.append((k, n, v))):
        TARGETS.get(target).fit(fed, params, [], seed=0)
    last = [h for h in heard if h[1] == total]
    assert [k for k, _, _ in last][-total:] == list(range(1, total + 1))
    assert all(0.0 <= v[value] <= 1.0 for _, _, v in last)
    if target == "gap":  # its encoder rounds report too, before the classifier's
        assert [(k, n) for k, n, _ in heard[:3]] == [(1, 3), (2, 3), (3, 3)]


def test_nobody_listening_costs_nothing_and_text_reads():
    report_round(1, 2, loss=0.5)  # no hook: nothing happens
    assert round_text(12, 100, {"val_accuracy": 0.7123}) == "round 12/100, val_accuracy 0.712"
