from pathlib import Path

import pytest

from workbench.errors import ConfigError
from workbench.suite import expand, load_suite, parse_suite

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
    for path in EXAMPLES.glob("*.yaml"):
        assert expand(load_suite(path))


def test_unknown_top_level_key():
    msg = error_of(suite(sedes=[1]))
    assert "sedes" in msg and "Extra inputs are not permitted" in msg


def test_unknown_key_inside_component_params_names_the_path():
    msg = error_of(suite(targets=[{"name": "fedavg", "params": {"roundz": 3}}]))
    assert "targets[0].params.roundz" in msg


def test_out_of_range_value_names_the_field_and_bound():
    msg = error_of(suite(targets=[{"name": "fedavg", "params": {"rounds": 0}}]))
    assert "targets[0].params.rounds" in msg and "greater than or equal to 1" in msg
    msg = error_of(suite(partitions=[{"method": "louvain", "num_clients": 0}]))
    assert "partitions[0].num_clients" in msg


def test_unknown_names_list_the_valid_choices():
    msg = error_of(suite(targets=[{"name": "fedavgg"}]))
    assert "targets[0].name: unknown target 'fedavgg'; valid choices: centralized, fedavg" in msg
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
    assert (
        "targets[0].defenses[0].name: unknown defense 'dp-fedavgg'; valid choices: dp-fedavg"
        in (error_of(suite(targets=[bad])))
    )
    bad = {**target, "defenses": [{"name": "dp-fedavg", "params": {"clip": -1}}]}
    assert "targets[0].defenses[0].params.clip" in error_of(suite(targets=[bad]))
