import pytest

from fgl_workbench.defenses import DEFENSES, covers, privacy_units
from fgl_workbench.errors import ConfigError


def test_every_defense_states_what_its_epsilon_protects():
    units = {
        name: DEFENSES.get(name).privacy_unit(DEFENSES.get(name).Config()) for name in DEFENSES
    }
    assert units == {
        "aggregation-perturbation": "edge",
        "dp-fedavg": "client",
        "dp-sgd": "record",
        "gaussian-upload": "client",
        "information-bottleneck": None,
        "masked-aggregation": None,
        "metric-dp": None,
        "secure-aggregation": None,
        "statistics-noise": "node",
    }


def test_edge_level_dp_alone_does_not_bound_membership():
    edge = {"name": "aggregation-perturbation", "params": {"level": "edge"}}
    node = {"name": "aggregation-perturbation", "params": {"level": "node"}}
    assert privacy_units([edge]) == {"edge"}
    assert not covers([edge])
    assert covers([node])
    assert covers([edge, {"name": "dp-sgd"}])
    assert not covers([{"name": "secure-aggregation"}])
    assert not covers([])


def test_edge_and_client_level_dp_bound_link_inference_record_level_does_not():
    assert covers([{"name": "aggregation-perturbation"}], "link")
    assert covers([{"name": "dp-fedavg"}], "link")
    assert not covers([{"name": "dp-sgd"}], "link")


def test_an_unknown_defense_is_named():
    with pytest.raises(ConfigError, match="unknown defense 'nope'"):
        covers([{"name": "nope"}])
