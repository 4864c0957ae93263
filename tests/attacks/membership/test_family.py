"""The membership family's scorer: every attack row carries its challenge's chance line,
computed once per challenge, at node and at graph level."""

import pytest

import fgl_workbench.attacks.membership.family as membership_family
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.families import FAMILIES
from fgl_workbench.attacks.metrics import chance_line
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.targets import TARGETS

CHANCE = ("chance_auc", "chance_auc_ci_low", "chance_auc_ci_high")


@pytest.mark.parametrize(
    ("dataset", "method", "config"),
    [
        ("small_csbm", "louvain", {"rounds": 3}),
        ("small_graphs", "iid", {"rounds": 3, "lr": 0.005}),
    ],
)
def test_every_row_carries_the_chance_line_computed_once(
    request, cell_inputs, monkeypatch, dataset, method, config
):
    ds = request.getfixturevalue(dataset)
    federation = build_federation(ds, make_partition(ds, method, 3, seed=0, aux_fraction=0.2))
    trained = TARGETS.get("fedavg").fit(federation, config, [], seed=0)
    cell = cell_inputs(trained, federation)
    fitted = []

    def counted(*args, **kwargs):
        fitted.append(1)
        return chance_line(*args, **kwargs)

    monkeypatch.setattr(membership_family, "chance_line", counted, raising=False)
    attack = ATTACKS.get("mia-threshold")
    rows = []
    for adversary in ("querier", "server"):
        cfg = attack.Config(signal="loss", adversary=adversary)
        family = FAMILIES["membership"].inputs(attack, cfg, cell)
        inp = AttackInput(family.view, family.knowledge, family.candidates, family.references)
        rows.append(family.score(attack.run(inp, cfg, seed=0))[0])
    assert len(fitted) == 1  # one challenge, one chance line
    line = [rows[0][key] for key in CHANCE]
    assert [rows[1][key] for key in CHANCE] == line
    assert line[1] <= line[0] <= line[2] and line[1] < 0.5 < line[2]  # an iid split: chance
