"""A suite is untrusted input: its size is capped before anything grows from it, fast and
in bounded memory, and numbers that would overflow later are refused while parsing, each as
one error naming the cap or the field (issue 43's fuzz findings)."""

import time

import pytest

from fgl_workbench.errors import ConfigError
from fgl_workbench.running.suite import (
    MAX_CELLS,
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_MAGNITUDE,
    MAX_NODES,
    MAX_SEEDS,
    MAX_SUITE_BYTES,
    load_suite,
    parse_suite,
)

FAST = 2.0  # seconds: a refusal reads no more of the input than the caps allow


def suite(**overrides):
    base = {
        "name": "t",
        "datasets": [{"name": "csbm"}],
        "partitions": [{"method": "louvain", "num_clients": 3}],
        "targets": [{"name": "fedavg", "params": {"rounds": 2}}],
    }
    return base | overrides


def refused(raw) -> str:
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        parse_suite(raw)
    assert time.perf_counter() - start < FAST
    return str(err.value)


def test_a_million_seeds_are_refused_naming_the_cap():
    msg = refused(suite(seeds=list(range(1_000_000))))
    assert f"seeds: 1000000 entries, over the cap of {MAX_SEEDS}" in msg


def test_ten_thousand_datasets_are_refused_naming_the_cap():
    msg = refused(suite(datasets=[{"name": "csbm"}] * 10_000))
    assert f"datasets: 10000 entries, over the cap of {MAX_ENTRIES}" in msg


def test_a_million_cell_grid_is_refused_before_it_is_expanded():
    """A thousand seeds times a thousand swept values: each list within its cap."""
    target = {"name": "fedavg", "sweep": {"params.rounds": list(range(1, 1001))}}
    msg = refused(suite(seeds=list(range(1000)), targets=[target]))
    assert f"the grid expands to 1000000 cells, over the cap of {MAX_CELLS}" in msg


def test_an_alias_bomb_is_refused_by_its_expanded_size(tmp_path):
    """Nine levels of ten aliases: a 10^9-value list in a few hundred bytes."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    lines += [
        "name: bomb",
        "datasets: [{name: csbm}]",
        "partitions: [{method: louvain, num_clients: 3}]",
        "targets: [{name: fedavg, sweep: {params.rounds: [*a9]}}]",
    ]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES} YAML values"):
        load_suite(path)
    assert time.perf_counter() - start < FAST


def test_nesting_deeper_than_the_cap_is_refused():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert f"nested more than {MAX_DEPTH} levels deep" in refused(suite(seeds=deep))


def test_a_suite_file_over_the_byte_cap_is_not_parsed(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: x\n" + "# padding\n" * (MAX_SUITE_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match=f"over the cap of {MAX_SUITE_BYTES} bytes"):
        load_suite(path)


@pytest.mark.parametrize("value", [1e300, 1e13])
def test_magnitudes_that_would_overflow_later_are_refused_naming_the_field(value):
    target = {
        "name": "fedavg",
        "params": {"rounds": 2},
        "defenses": [{"name": "dp-fedavg", "params": {"clip": value}}],
    }
    msg = refused(suite(targets=[target]))
    expected = f"targets[0].defenses[0].params.clip: expected a magnitude at most {MAX_MAGNITUDE:g}"
    assert expected in msg


def test_a_swept_noise_multiplier_is_bounded_too():
    target = {
        "name": "fedavg",
        "params": {"rounds": 2},
        "defenses": [{"name": "dp-fedavg"}],
        "sweep": {"defenses[0].params.noise_multiplier": [1.0, 1e300]},
    }
    msg = refused(suite(targets=[target]))
    assert "params.noise_multiplier: expected a magnitude at most" in msg


def test_suites_within_the_caps_still_parse():
    target = {"name": "fedavg", "sweep": {"params.rounds": [1, 2, 3]}}
    parsed = parse_suite(suite(seeds=list(range(10)), targets=[target]))
    assert len(parsed.targets) == 3 and len(parsed.seeds) == 10


def test_a_huge_value_is_shown_shortened_in_the_error():
    target = {"name": "fedavg", "params": {"rounds": "9" * 5000}}
    msg = refused(suite(targets=[target]))
    assert "targets[0].params.rounds" in msg and len(msg) < 400


def test_an_integer_past_pythons_digit_limit_is_one_error(tmp_path):
    path = tmp_path / "digits.yaml"
    path.write_text("name: x\nseeds: [" + "9" * 5000 + "]\n")
    with pytest.raises(ConfigError, match="not a readable YAML text"):
        load_suite(path)


def test_a_secagg_threshold_of_half_the_clients_is_refused_when_the_suite_is_read():
    target = {
        "name": "opfgl",
        "defenses": [{"name": "masked-aggregation", "params": {"threshold": 2}}],
    }
    partitions = [{"method": "louvain", "num_clients": 3}, {"method": "louvain", "num_clients": 4}]
    msg = refused(suite(targets=[target], partitions=partitions))
    assert "targets[0].defenses[0] with partitions[1]: defenses.masked-aggregation.threshold" in msg
    assert "partitions[0]" not in msg  # 2 of 3 is a majority
