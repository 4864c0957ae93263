"""Calibration by ε: for every (target, defense) pair that supports it, a short real fit with
the calibrated σ writes a ledger whose largest finite ε is at most the target (equal to it,
within the bisection's tolerance, where the planned counts are exact); the σ grows as the
target shrinks; what cannot be calibrated is refused with the field named; and a suite run
through the command line stores the σ, the recipe and the audit at it."""

import json
import math

import pytest
import torch

from fgl_workbench.accountants import calibrate_sigma, epsilons_by_adversary, largest_finite_epsilon
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.errors import ConfigError
from fgl_workbench.interface.api import results
from fgl_workbench.interface.cli import main
from fgl_workbench.reports.report import privacy_figure
from fgl_workbench.running.calibration import calibrate_defenses
from fgl_workbench.running.suite import expand, parse_suite
from fgl_workbench.storage.snapshot import restore
from fgl_workbench.storage.store import CALIBRATED_SIGMA, ResultsStore
from fgl_workbench.targets import TARGETS

DELTA = 1e-5
# small generators; graphs of at most 20 nodes are templates, so each lends its features to
# several synthetic graphs (a group in the GIN's DP-SGD)
GENERATOR = {
    "epochs": 1,
    "steps": 1,
    "max_nodes": 20,
    "channels": [2],
    "features": 4,
    "sigmas": [0.4, 0.8],
}
NODE_AP = {"level": "node", "max_degree": 8}


@pytest.fixture(scope="module")
def nodes(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "metis", 3, 0))


@pytest.fixture(scope="module")
def graphs(small_graphs):
    return build_federation(small_graphs, make_partition(small_graphs, "iid", 3, 0))


def calibrated(target_name, federation, config, defenses):
    """(calibration, trained target, largest finite ε of the ledger it wrote)."""
    target = TARGETS.get(target_name)
    given = [applied(name, params) for name, params in defenses]
    calibration = calibrate_defenses(target, federation, target.Config(**config), given, DELTA)
    trained = target.fit(federation, config, calibration.defenses, 0)
    return calibration, trained, largest_finite_epsilon(trained.ledger, DELTA)


# (target, federation, config, defenses, target ε, planned counts exact)
PAIRS = {
    "fedavg/dp-fedavg central": (
        "fedavg",
        "nodes",
        {"rounds": 2, "local_epochs": 1, "client_fraction": 0.5},
        [("dp-fedavg", {"target_epsilon": 4.0})],
        4.0,
        True,
    ),
    "fedavg/dp-fedavg local": (
        "fedavg",
        "nodes",
        {"rounds": 3, "local_epochs": 1, "client_fraction": 0.5},
        [("dp-fedavg", {"target_epsilon": 4.0, "mode": "local"})],
        4.0,
        False,  # the busiest client's rounds, planned as all of them
    ),
    "fedavg/gaussian-upload": (
        "fedavg",
        "nodes",
        {"rounds": 2, "local_epochs": 1},
        [("gaussian-upload", {"target_epsilon": 8.0})],
        8.0,
        True,  # every client uploads every round
    ),
    "fedtad/gaussian-upload": (
        "fedtad",
        "nodes",
        {"rounds": 2, "local_epochs": 1, "client_fraction": 0.5, "outer_steps": 0},
        [("gaussian-upload", {"target_epsilon": 8.0})],
        8.0,
        False,
    ),
    "fedavg/dp-sgd": (
        "fedavg",
        "graphs",
        {"rounds": 1, "local_epochs": 1},
        [("dp-sgd", {"target_epsilon": 3.0, "sample_rate": 0.5})],
        3.0,
        True,
    ),
    "gap/aggregation-perturbation edge": (
        "gap",
        "nodes",
        {"encoder_rounds": 1, "rounds": 1, "local_epochs": 1},
        [("aggregation-perturbation", {"target_epsilon": 3.0})],
        3.0,
        True,
    ),
    "gap/aggregation-perturbation node": (
        "gap",
        "nodes",
        {"encoder_rounds": 1, "rounds": 1, "local_epochs": 1},
        [
            ("aggregation-perturbation", {**NODE_AP, "target_epsilon": 6.0}),
            ("dp-sgd", {"noise_multiplier": 2.0, "sample_rate": 0.5}),
        ],
        6.0,
        True,
    ),
    "gap/dp-sgd": (
        "gap",
        "nodes",
        {"encoder_rounds": 1, "rounds": 1, "local_epochs": 1},
        [
            (
                "aggregation-perturbation",
                {"noise_multiplier": 8.0, "level": "node", "max_degree": 8},
            ),
            ("dp-sgd", {"target_epsilon": 6.0, "sample_rate": 0.5}),
        ],
        6.0,
        True,
    ),
    "cefgc/dp-sgd": (
        "cefgc",
        "graphs",
        {"generator": GENERATOR, "epochs": 1, "synthetic_ratio": 0.5},
        [("dp-sgd", {"target_epsilon": 5.0, "sample_rate": 0.2})],
        5.0,
        True,  # every client receives generators, so synthesises its full count
    ),
}


@pytest.mark.parametrize("pair", list(PAIRS))
def test_the_real_ledger_meets_the_target(pair, request):
    name, fed, config, defenses, goal, exact = PAIRS[pair]
    federation = request.getfixturevalue(fed)
    calibration, trained, reached = calibrated(name, federation, config, defenses)
    sigma = calibration.noise_multiplier
    assert sigma is not None and calibration.planned_epsilon <= goal
    assert reached <= goal  # never a σ that exceeds the budget
    if exact:  # the planned ledger is the one fit wrote, so the bisection's σ is tight
        target = TARGETS.get(name)
        planned = target.planned_ledger(federation, config, calibration.defenses)
        assert planned == trained.ledger
        assert reached == pytest.approx(goal, rel=1e-4)
    # the target trained at σ: the recipe (shadow and reference models) carries it
    assert sigma in {d.config.noise_multiplier for d in trained.recipe.defenses}
    assert all(d.config.target_epsilon is None for d in trained.recipe.defenses)


def test_a_server_without_a_guarantee_stays_infinite(nodes):
    """Central DP-FedAvg: the server adds the noise, so its row is ∞ whatever σ; the σ is
    calibrated for the others."""
    config = {"rounds": 2, "local_epochs": 1}
    _, trained, reached = calibrated(
        "fedavg", nodes, config, [("dp-fedavg", {"target_epsilon": 2.0})]
    )
    rows = {r.adversary: r.epsilon for r in epsilons_by_adversary(trained.ledger, DELTA)}
    assert math.isinf(rows["server"])
    assert rows["clients"] == rows["querier"] == reached == pytest.approx(2.0, rel=1e-4)


def test_dp_sgd_sigma_is_the_calculators(graphs):
    """A single SubsampledGaussian ledger: the σ of `fgl-workbench epsilon --target-epsilon`."""
    config = {"rounds": 1, "local_epochs": 2}
    target = TARGETS.get("fedavg")
    given = [applied("dp-sgd", {"target_epsilon": 3.0, "sample_rate": 0.2})]
    calibration = calibrate_defenses(target, graphs, target.Config(**config), given, DELTA)
    steps = 1 * 2 * 5  # rounds × local epochs × ⌈1/q⌉
    by_calculator = calibrate_sigma(3.0, DELTA, 0.2, steps)
    assert calibration.noise_multiplier == pytest.approx(by_calculator, rel=1e-6)


def test_sigma_grows_as_the_target_shrinks(nodes):
    target = TARGETS.get("gap")
    config = target.Config(encoder_rounds=1, rounds=1)

    def sigma(goal):
        given = [applied("aggregation-perturbation", {"target_epsilon": goal})]
        return calibrate_defenses(target, nodes, config, given, DELTA).noise_multiplier

    sigmas = [sigma(goal) for goal in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert all(a > b for a, b in zip(sigmas, sigmas[1:], strict=False))


def test_what_no_sigma_reaches_is_refused(nodes):
    """GAP at node level: DP-SGD's fixed σ alone exceeds the target, so no σ for the
    aggregation perturbation meets it."""
    target = TARGETS.get("gap")
    given = [
        applied("aggregation-perturbation", {"target_epsilon": 0.5, "level": "node"}),
        applied("dp-sgd", {"noise_multiplier": 0.5, "sample_rate": 0.5}),
    ]
    with pytest.raises(ConfigError, match=r"defenses\[0\].params.target_epsilon: gap with agg"):
        calibrate_defenses(target, nodes, target.Config(encoder_rounds=1, rounds=1), given, DELTA)
    two = [
        applied("aggregation-perturbation", {"target_epsilon": 4.0, "level": "node"}),
        applied("dp-sgd", {"target_epsilon": 4.0}),
    ]
    with pytest.raises(ConfigError, match="more than one noise multiplier"):
        calibrate_defenses(target, nodes, target.Config(), two, DELTA)
    # fit's refusals come before any training
    with pytest.raises(ConfigError, match="graph-level only"):
        fedavg = TARGETS.get("fedavg")
        calibrate_defenses(
            fedavg, nodes, fedavg.Config(), [applied("dp-sgd", {"target_epsilon": 1.0})], DELTA
        )


SUITE = {
    "name": "calibration",
    "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
    "partitions": [{"method": "metis", "num_clients": 2}],
}


def suite_problems(targets):
    with pytest.raises(ConfigError) as info:
        parse_suite({**SUITE, "targets": targets})
    return str(info.value)


def test_the_suite_refuses_what_cannot_be_calibrated():
    dp = {"name": "dp-fedavg", "params": {"target_epsilon": 2.0, "noise_multiplier": 1.0}}
    assert "targets[0].defenses[0].params: target_epsilon: give noise_multiplier or" in (
        suite_problems([{"name": "fedavg", "defenses": [dp]}])
    )
    metric = {"name": "metric-dp", "params": {"target_epsilon": 2.0}}
    assert "targets[0].defenses[0].params.target_epsilon: metric-dp cannot be calibrated" in (
        suite_problems([{"name": "fedavg", "defenses": [metric]}])
    )
    stats = {"name": "statistics-noise", "params": {"target_epsilon": 2.0}}
    assert "statistics-noise cannot be calibrated by ε: its ledger claims no finite ε" in (
        suite_problems([{"name": "opfgl", "defenses": [stats]}])
    )
    two = [
        {"name": "aggregation-perturbation", "params": {"target_epsilon": 2.0, "level": "node"}},
        {"name": "dp-sgd", "params": {"target_epsilon": 2.0}},
    ]
    assert "target_epsilon is given on aggregation-perturbation and dp-sgd" in (
        suite_problems([{"name": "gap", "defenses": two}])
    )
    sgd = {"name": "dp-sgd", "params": {"target_epsilon": 2.0}}
    assert "target fedgc cannot plan its ledger before training" in (
        suite_problems([{"name": "fedgc", "defenses": [sgd]}])
    )
    swept = {
        "name": "fedavg",
        "defenses": [{"name": "dp-fedavg", "params": {"noise_multiplier": 1.0}}],
        "sweep": {"defenses[0].params.target_epsilon": [1.0, 2.0]},
    }
    assert "targets[1].defenses[0].params: target_epsilon: give" in suite_problems([swept])


def test_a_calibrated_suite_runs_end_to_end(tmp_path):
    """Through the command line: the cell id hashes the entry as written, the σ is stored
    beside the utility and reaches the results table, the report, the snapshot's recipe
    (what `attack DIR` and reference models retrain with) and the canary audit's claim."""

    entry = {
        "name": "fedavg",
        "params": {"rounds": 2, "local_epochs": 1},
        "defenses": [{"name": "dp-fedavg", "params": {"target_epsilon": 3.0}}],
    }
    raw = {**SUITE, "reproducible": True, "targets": [entry], "audit": {"canaries": 50}}
    raw["attacks"] = [{"name": "mia-threshold"}]
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(raw))
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    (cell,) = expand(parse_suite(raw))
    store = ResultsStore(out, create=False)
    try:
        (row,) = store.cells()
        (attack,) = store.attacks()
        target_path = store.target_path(row.cell_id)
    finally:
        store.close()
    assert row.cell_id == cell.cell_id and row.config == cell.config()
    assert row.config["target"]["defenses"][0]["params"] == {"target_epsilon": 3.0}
    sigma = row.utility[CALIBRATED_SIGMA]
    finite = [e["epsilon"] for e in row.epsilons if math.isfinite(e["epsilon"])]
    assert max(finite) == pytest.approx(3.0, rel=1e-4) and max(finite) <= 3.0
    assert attack.status == "ok"
    assert {a["claimed"] for a in row.audits} == {max(finite)}  # audited at σ
    assert results(out)[f"utility.{CALIBRATED_SIGMA}"].tolist() == [sigma]
    assert f"σ {sigma:.4g} calibrated to ε ≤ 3 (dp-fedavg)" in privacy_figure(row)
    data = load_dataset(cell.dataset.name, cell.dataset.params)
    partition = make_partition(data, "metis", 2, 0)  # the recipe does not depend on it
    with torch.device("cpu"):
        restored = restore(target_path, build_federation(data, partition))
    (dp,) = restored.recipe.defenses
    assert dp.config.noise_multiplier == sigma and dp.config.target_epsilon is None
