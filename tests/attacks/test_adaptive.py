import numpy as np
import pytest
import torch

from fgl_workbench.attacks.adaptive import adaptive_input, ib_surrogate_features
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.targets import TARGETS

FAST = {"epochs": 30, "head_hidden": 16, "lr": 0.01}


@pytest.fixture(scope="module")
def defended(small_csbm):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0, aux_fraction=0.2))
    ib = applied("information-bottleneck", FAST)
    return fed, TARGETS.get("fedavg").fit(fed, {"rounds": 3}, [ib], seed=0)


def test_raw_features_leave_the_input_alone(defended, querier_input):
    inp, _ = querier_input(*defended)
    assert adaptive_input(inp, "raw", "test", 0) is inp


def test_ib_surrogate_moves_the_whole_attack_into_z_space(defended, querier_input):
    fed, trained = defended
    inp, challenge = querier_input(fed, trained)
    moved = adaptive_input(inp, "ib-surrogate", "test", 0)
    z = ib_surrogate_features(inp.knowledge, "test", 0)
    assert torch.equal(moved.knowledge.graph.x, z)  # shadows and references train on z′
    assert torch.equal(moved.knowledge.graph.edge_index, inp.knowledge.graph.edge_index)
    assert not torch.equal(inp.knowledge.graph.x, z)  # the caller's knowledge is untouched
    assert [d.name for d in inp.knowledge.recipe.defenses] == ["information-bottleneck"]
    assert moved.knowledge.recipe.defenses == ()  # the data is encoded already
    ids = challenge.candidates.ids
    expected = inp.view.api.with_features(z).logits(ids, 1)
    torch.testing.assert_close(moved.view.api.logits(ids, 1), expected)
    assert np.array_equal(moved.candidates.ids, ids)
