"""Plug-ins: targets, attacks and defenses from entry points and from ``module:Class``
references in a suite, each checked against its interface when loaded and listed with where
it came from; the example plug-in package (FedProx) runs a suite with two attacks and one
defense."""

import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

from fgl_workbench.attacks import ATTACKS
from fgl_workbench.errors import ConfigError
from fgl_workbench.interface.cli import main
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite
from fgl_workbench.storage.store import ResultsStore
from fgl_workbench.targets import TARGETS

REPO = Path(__file__).resolve().parents[2]
SUITE = {
    "name": "plugins",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "attacks": [],
}


PLUGINS = """
import numpy as np
from pydantic import BaseModel

from fgl_workbench.attacks import AttackOutput
from fgl_workbench.targets.fedavg import FedAvg


class EchoConfig(BaseModel):
    pass


class Echo(FedAvg):  # a valid target: FedAvg under another name
    name = "echo-fedavg"


class NoFit:  # an invalid one
    name = "nofit"
    level = "node"
    Config = dict


class Constant:  # a valid attack: every candidate scores the same
    name = "constant-attack"
    family = "membership"
    Config = EchoConfig

    def run(self, inp, config, seed):
        return AttackOutput(np.zeros(len(inp.candidates.ids)))
"""


@pytest.fixture
def plugin_module(monkeypatch, tmp_path_factory):
    """A module of third-party components, importable as ``my_plugins`` (from a file, as a
    plug-in attack's worker process imports it again)."""
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "my_plugins.py").write_text(PLUGINS)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "my_plugins", raising=False)
    for registry in (TARGETS, ATTACKS):  # what the test registers is gone after it
        registry.names()  # entry points loaded first: they stay
        monkeypatch.setattr(registry, "_items", dict(registry._items))
        monkeypatch.setattr(registry, "_origins", dict(registry._origins))


def test_a_module_reference_in_a_suite_loads_and_runs(plugin_module, tmp_path):
    raw = {
        **SUITE,
        "targets": [{"name": "my_plugins:Echo", "params": {"rounds": 2}}],
        "attacks": [{"name": "my_plugins:Constant"}],
        "trust_plugins": True,  # sandboxed where the kernel can; runs on kernels that cannot
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    (row,) = ResultsStore(tmp_path).attacks()
    assert row.status == "ok" and row.metrics["auc"] == 0.5
    assert TARGETS.origin("my_plugins:Echo") == "module reference"
    assert "echo-fedavg" in TARGETS  # known by its own name too, as its recipe names it
    assert ATTACKS.origin("constant-attack") == "module reference"


def test_a_plugin_missing_part_of_the_interface_is_refused_saying_what(plugin_module):
    with pytest.raises(ConfigError) as exc:
        parse_suite({**SUITE, "targets": [{"name": "my_plugins:NoFit"}]})
    message = str(exc.value)
    assert "targets[0].name" in message and "fit(federation" in message
    assert "Config (a pydantic BaseModel class" in message
    with pytest.raises(ConfigError, match="cannot import module 'no_such_package.mod'"):
        parse_suite({**SUITE, "targets": [{"name": "no_such_package.mod:Target"}]})
    with pytest.raises(ConfigError, match="has no attribute 'Missing'"):
        parse_suite({**SUITE, "targets": [{"name": "my_plugins:Missing"}]})


def installed_example() -> bool:
    return any(ep.name == "fedprox" for ep in entry_points(group="fgl_workbench.targets"))


def test_the_example_plugin_is_installed_listed_and_runs_its_suite(tmp_path, capsys):
    if not installed_example():
        if os.environ.get("CI"):
            pytest.fail("examples/custom_target is not installed (make setup-dev installs it)")
        pytest.skip("pip install -e examples/custom_target")
    assert main(["list", "targets"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "fedprox" in x)
    assert "entry point fgl_workbench.targets: fedprox_plugin:FedProx" in line
    raw = yaml.safe_load((REPO / "examples" / "custom_target" / "suite.yaml").read_text())
    raw["datasets"] = [{"name": "csbm", "params": {"num_nodes": 300}}]
    for t in raw["targets"]:
        t["params"]["rounds"] = 3
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    store = ResultsStore(tmp_path)
    cells, rows = store.cells(), store.attacks()
    assert len(cells) == 2 and len(rows) == 4 and all(r.status == "ok" for r in rows)
    defended = next(c for c in cells if "dp-fedavg" in c.label)
    assert defended.epsilon is not None and defended.label.startswith("csbm/louvain-4/fedprox")
