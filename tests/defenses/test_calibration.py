"""``target_epsilon`` in a defense's config: given instead of ``noise_multiplier``, never both,
refused by defenses whose ε no σ sets, hidden from the recipe text that seeds reference
models, and never reaching a target's training unresolved."""

import pytest
from pydantic import ValidationError

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import DEFENSES, applied
from fgl_workbench.defenses.calibration import (
    calibratable,
    calibrating,
    refusal,
    require_noise,
    target_epsilon,
    with_noise,
)
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.training import TrainingRecipe

CALIBRATED = ("aggregation-perturbation", "dp-fedavg", "dp-sgd", "gaussian-upload")


def test_the_noise_driven_defenses_take_target_epsilon_and_no_other_does():
    assert [n for n in DEFENSES.names() if calibratable(n)] == list(CALIBRATED)
    assert "ρ" in refusal("metric-dp")  # ε(ρ) needs ρ measured after training
    assert "no finite ε" in refusal("statistics-noise")  # NoGuarantee whatever σ
    for name in ("secure-aggregation", "masked-aggregation", "information-bottleneck"):
        assert "no (ε, δ) guarantee" in refusal(name)


@pytest.mark.parametrize("name", CALIBRATED)
def test_noise_multiplier_and_target_epsilon_are_exclusive(name):
    with pytest.raises(ValidationError, match="target_epsilon: give noise_multiplier or"):
        applied(name, {"noise_multiplier": 1.0, "target_epsilon": 2.0})
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValidationError, match="target_epsilon"):
            applied(name, {"target_epsilon": bad})
    given = applied(name, {"target_epsilon": 2.0})
    assert target_epsilon(given) == 2.0 and calibrating([applied(name, {}), given]) == [1]


@pytest.mark.parametrize("name", CALIBRATED)
def test_a_calibrated_config_reads_as_if_sigma_were_written(name):
    """The resolved config is the one written with noise_multiplier: σ, down to its repr, so a
    reference model's seed (from the recipe's text) is the one a hand-written σ gives, and the
    repr of configs without target_epsilon is what it was before the field existed."""
    resolved = with_noise(applied(name, {"target_epsilon": 2.0}), 1.7)
    written = applied(name, {"noise_multiplier": 1.7})
    assert resolved == written and target_epsilon(resolved) is None
    assert "target_epsilon" not in repr(written.config)
    recipe = TrainingRecipe("fedavg", {}, 2, 10, (resolved,))
    assert recipe.identity() == TrainingRecipe("fedavg", {}, 2, 10, (written,)).identity()


def test_dp_sgd_repr_is_unchanged_by_the_new_field():
    assert repr(applied("dp-sgd", {}).config) == (
        "DPSGDConfig(clip=1.0, noise_multiplier=1.0, sample_rate=0.1)"
    )


def test_targets_refuse_to_train_an_uncalibrated_defense(small_csbm, small_graphs):
    """A config still holding target_epsilon would otherwise train at the default σ = 1."""
    nodes = build_federation(small_csbm, make_partition(small_csbm, "metis", 2, 0))
    graphs = build_federation(small_graphs, make_partition(small_graphs, "iid", 2, 0))
    cases = [
        ("fedavg", nodes, [applied("dp-fedavg", {"target_epsilon": 2.0})]),
        ("fedavg", graphs, [applied("dp-sgd", {"target_epsilon": 2.0})]),
        ("fedtad", nodes, [applied("gaussian-upload", {"target_epsilon": 2.0})]),
        ("gap", nodes, [applied("aggregation-perturbation", {"target_epsilon": 2.0})]),
        ("cefgc", graphs, [applied("dp-sgd", {"target_epsilon": 2.0})]),
    ]
    for target, federation, defenses in cases:
        with pytest.raises(ConfigError, match="must be calibrated first"):
            TARGETS.get(target).fit(federation, {}, defenses, 0)
    with pytest.raises(ConfigError, match=r"defenses\[0\].params.target_epsilon: gap"):
        require_noise("gap", cases[3][2])
