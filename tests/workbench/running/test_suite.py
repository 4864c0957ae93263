import warnings
from pathlib import Path

import pytest

from fgl_workbench.errors import ConfigError
from fgl_workbench.running.suite import Suite, expand, load_suite, parse_suite

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def suite(**overrides):
    base = {
        "name": "t",
        "datasets": [{"name": "csbm"}],
        "partitions": [{"method": "louvain", "num_clients": 3}],
        "targets": [{"name": "fedavg", "params": {"rounds": 2}}],
        "attacks": [{"name": "mia-threshold"}],
    }
    base.update(overrides)
    return base


def error_of(raw) -> str:
    with pytest.raises(ConfigError) as err:
        parse_suite(raw)
    return str(err.value)


def test_examples_parse():
    for path in EXAMPLES.rglob("*.yaml"):
        assert expand(load_suite(path))


def test_unknown_top_level_key():
    msg = error_of(suite(sedes=[1]))
    assert "sedes: unknown field (did you mean 'seeds'?); valid fields: name, seeds" in msg


def test_unknown_key_inside_component_params_names_the_path():
    msg = error_of(suite(targets=[{"name": "fedavg", "params": {"roundz": 3}}]))
    assert "targets[0].params.roundz" in msg


def test_every_problem_is_reported_at_once_with_the_nearest_valid_name():
    """A structural error in one section does not hide unknown names and parameters in the
    others; unknown parameters list the valid ones, nested ones too."""
    msg = error_of(
        suite(
            seeds=[-1],
            partitions=[{"method": "louvian", "num_clients": 2}],
            targets=[{"name": "fedavg", "params": {"rouns": 3, "model": {"hiden": 8}}}],
            attacks=[{"name": "mia-shaddow"}, {"name": "mia-threshold", "params": {"signl": 1}}],
        )
    )
    for line in (
        "seeds[0]: Input should be greater than or equal to 0",
        "partitions[0].method: unknown partitioner 'louvian' (did you mean 'louvain'?)",
        "targets[0].params.rouns: unknown parameter (did you mean 'rounds'?); valid "
        "parameters: model, rounds, local_epochs",
        "targets[0].params.model.hiden: unknown parameter (did you mean 'hidden'?); valid "
        "parameters: arch, hidden",
        "attacks[0].name: unknown attack 'mia-shaddow' (did you mean 'mia-shadow'?)",
        "attacks[1].params.signl: unknown parameter (did you mean 'signal'?)",
    ):
        assert line in msg, (line, msg)
    assert "did you mean" not in error_of(suite(targets=[{"name": "zzzz"}]))
    msg = error_of(suite(partitions=[{"method": "louvain", "num_clients": 2, "splitt": "public"}]))
    assert "partitions[0].splitt: unknown field (did you mean 'split'?); valid fields: " in msg
    # a YAML key that is not a string is a config error too, not a crash
    assert "targets[0]" in error_of(suite(seeds=[-1], targets=[{"name": "fedavg", 1: 2}]))


def test_out_of_range_value_names_the_field_and_bound():
    msg = error_of(suite(targets=[{"name": "fedavg", "params": {"rounds": 0}}]))
    assert "targets[0].params.rounds" in msg and "greater than or equal to 1" in msg
    msg = error_of(suite(partitions=[{"method": "louvain", "num_clients": 0}]))
    assert "partitions[0].num_clients" in msg


def test_unknown_names_list_the_valid_choices():
    msg = error_of(suite(targets=[{"name": "fedavgg"}]))
    expected = (
        "unknown target 'fedavgg' (did you mean 'fedavg'?); valid choices: ce-fedgnn, cefgc, "
        "centralized, fedavg"
    )
    assert f"targets[0].name: {expected}" in msg
    msg = error_of(suite(attacks=[{"name": "lira"}]))
    assert "attacks[0].name" in msg and "mia-threshold" in msg
    msg = error_of(suite(datasets=[{"name": "cora"}]))
    assert "Cora" in msg
    msg = error_of(suite(partitions=[{"method": "louvian", "num_clients": 2}]))
    assert "partitions[0].method" in msg and "metis" in msg


def test_literal_choices_are_listed():
    msg = error_of(suite(attacks=[{"name": "mia-threshold", "params": {"signal": "los"}}]))
    assert "attacks[0].params.signal" in msg and "'loss'" in msg


def test_bad_split_and_level_mismatch():
    assert "split" in error_of(
        suite(partitions=[{"method": "louvain", "num_clients": 2, "split": [0.5, 0.5, 0.5]}])
    )
    msg = error_of(suite(datasets=[{"name": "MUTAG"}]))
    assert "graph-level" in msg and "iid" in msg
    assert "split" in error_of(
        suite(partitions=[{"method": "louvain", "num_clients": 2, "split": "publik"}])
    )
    public = parse_suite(
        suite(partitions=[{"method": "louvain", "num_clients": 2, "split": "public"}])
    )
    assert public.partitions[0].split == "public"
    ratios = parse_suite(
        suite(partitions=[{"method": "louvain", "num_clients": 2, "split": [0.5, 0, 0.5]}])
    )
    for parsed in (public, ratios):  # the runner stores suites as JSON and reads them back
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert Suite.model_validate_json(parsed.model_dump_json()) == parsed


def test_grid_pairs_partitions_with_datasets_of_their_level():
    raw = suite(
        datasets=[{"name": "csbm"}, {"name": "synthetic-graphs"}],
        partitions=[{"method": "louvain", "num_clients": 3}, {"method": "iid", "num_clients": 2}],
        seeds=[0, 1, 2],
    )
    cells = expand(parse_suite(raw))
    assert len(cells) == 2 * 3
    assert len({c.cell_id for c in cells}) == 6


def test_yaml_errors_are_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_suite(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_suite(tmp_path / "missing.yaml")


def test_defenses_are_validated_labelled_and_hashed_only_when_present():
    dp = {"name": "dp-fedavg", "params": {"clip": 1.0, "noise_multiplier": 0.8}}
    target = {"name": "fedavg", "params": {"rounds": 2}, "defenses": [dp]}
    cells = expand(
        parse_suite(suite(targets=[target, {"name": "fedavg", "params": {"rounds": 2}}]))
    )
    defended, plain = cells
    assert defended.label == "csbm/louvain-3/fedavg+dp-fedavg/seed0"
    assert "defenses" in defended.config()["target"]
    assert "defenses" not in plain.config()["target"]  # undefended cells keep their ids
    assert defended.cell_id != plain.cell_id
    bad = {**target, "defenses": [{"name": "dp-fedavgg"}]}
    msg = error_of(suite(targets=[bad]))
    assert "targets[0].defenses[0].name: unknown defense 'dp-fedavgg' (did you mean" in msg
    assert "dp-fedavg, dp-sgd" in msg
    bad = {**target, "defenses": [{"name": "dp-fedavg", "params": {"clip": -1}}]}
    assert "targets[0].defenses[0].params.clip" in error_of(suite(targets=[bad]))


def dp_target(sigma=None, lr=None, sweep=None):
    params = {"rounds": 2} | ({} if lr is None else {"lr": lr})
    dp = {"clip": 1.0} | ({} if sigma is None else {"noise_multiplier": sigma})
    entry = {"name": "fedavg", "params": params, "defenses": [{"name": "dp-fedavg", "params": dp}]}
    return entry | ({"sweep": sweep} if sweep else {})


def test_sweep_expands_to_the_cells_written_out_by_hand():
    sweep = {"defenses[0].params.noise_multiplier": [0.3, 1.0], "params.lr": [0.1, 0.01]}
    swept = expand(parse_suite(suite(targets=[dp_target(sweep=sweep)])))
    by_hand = [dp_target(s, lr) for s in (0.3, 1.0) for lr in (0.1, 0.01)]
    written = expand(parse_suite(suite(targets=by_hand)))
    assert [c.cell_id for c in swept] == [c.cell_id for c in written]
    assert len({c.cell_id for c in swept}) == 4


def test_sweep_errors_name_the_path_and_check_every_value():
    msg = error_of(suite(targets=[dp_target(sweep={"defenses[3].params.clip": [1.0]})]))
    assert "targets[0].sweep.defenses[3].params.clip: expected a path" in msg
    assert "expected a non-empty list" in error_of(
        suite(targets=[dp_target(sweep={"params.lr": []})])
    )
    msg = error_of(
        suite(targets=[dp_target(sweep={"defenses[0].params.noise_multiplier": [1, -1]})])
    )
    assert "noise_multiplier" in msg and "greater than 0" in msg


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ({"seeds": [-1]}, "seeds[0]: Input should be greater than or equal to 0"),
        (
            {
                "targets": [
                    {
                        "name": "fedavg",
                        "defenses": [
                            {"name": "dp-fedavg", "params": {"noise_multiplier": float("inf")}}
                        ],
                    }
                ]
            },
            "targets[0].defenses[0].params.noise_multiplier: Input should be a finite number",
        ),
        (
            {
                "targets": [
                    {
                        "name": "fedavg",
                        "defenses": [{"name": "dp-fedavg", "params": {"clip": float("inf")}}],
                    }
                ]
            },
            "targets[0].defenses[0].params.clip: Input should be a finite number",
        ),
        (
            {"partitions": [{"method": "metis", "num_clients": 3, "split": [float("nan")] * 3}]},
            "partitions[0].split[0]: Input should be a finite number",
        ),
    ],
)
def test_fuzzed_inputs_are_refused_when_the_suite_is_read(patch, named):
    """Each once passed validation and failed at run time with a traceback."""
    base = {
        "name": "fuzz",
        "datasets": [{"name": "csbm"}],
        "partitions": [{"method": "metis", "num_clients": 3}],
        "targets": [{"name": "fedavg"}],
    }
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_suite({**base, **patch})
