"""Third-party attacks are described by a fenced process, never imported by the runner: the
runner holds a stand-in with the plug-in's name, family, threat and config fields; the
plug-in's own config checks its parameters there, its errors named by field here; whatever
the describer answers is checked, capped and never unpickled."""

import sys
import textwrap

import pytest

from fgl_workbench import sandbox
from fgl_workbench.attacks import ATTACKS, plugins
from fgl_workbench.attacks.families import adversaries
from fgl_workbench.errors import ConfigError
from fgl_workbench.running.suite import parse_suite

SUITE = {
    "name": "plugins",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "targets": [{"name": "fedavg"}],
    "trust_plugins": True,  # described fenced where the kernel can; runs where it cannot
}
HEADER = """
import numpy as np
from typing import Literal
from pydantic import BaseModel, ConfigDict, Field
from fgl_workbench.attacks import AttackOutput
from fgl_workbench.attacks.base import ThreatModel
"""
GOOD = """
class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    adversary: Literal["server", "querier"] = "server"
    rounds: int = Field(3, ge=1)

class Server:
    name = "server-guess"
    family = "membership"
    threat = ThreatModel(sees="what the server receives", knows="nothing else")
    Config = ServerConfig

    def run(self, inp, config, seed):
        return AttackOutput(np.zeros(len(inp.candidates.ids)))
"""


def zero_scorer(cls: str, name: str, config: str) -> str:
    """A membership plug-in class scoring every candidate 0, with config class ``config``
    (what these tests check is refused before it runs). No braces: it joins ``.format``
    templates."""
    return f"""
class {cls}:
    name = "{name}"
    family = "membership"
    Config = {config}

    def run(self, inp, config, seed):
        return AttackOutput(np.zeros(len(inp.candidates.ids)))
"""


@pytest.fixture
def plugin(monkeypatch, tmp_path):
    """Writes a plug-in module (its import-time code first) under a fresh name; returns that
    name. What the test registers is gone after it."""
    count = iter(range(100))

    def write(code: str, tail: str = GOOD) -> str:
        module = f"described_{next(count)}"
        source = HEADER + textwrap.dedent(code) + tail
        (tmp_path / f"{module}.py").write_text(source)
        return module

    monkeypatch.syspath_prepend(str(tmp_path))
    ATTACKS.names()
    monkeypatch.setattr(ATTACKS, "_items", dict(ATTACKS._items))
    monkeypatch.setattr(ATTACKS, "_origins", dict(ATTACKS._origins))
    return write


def suite_with(reference: str, params: dict | None = None) -> dict:
    return {**SUITE, "attacks": [{"name": reference, "params": params or {}}]}


def test_the_runner_holds_a_description_never_the_module(plugin):
    module = plugin("")
    parse_suite(suite_with(f"{module}:Server", {"rounds": 5}))
    assert module not in sys.modules  # checked, never imported here
    attack = ATTACKS.get(f"{module}:Server")
    assert isinstance(attack, plugins.PluginAttack)
    assert (attack.name, attack.family) == ("server-guess", "membership")
    assert attack.threat.sees == "what the server receives"
    assert adversaries(attack) == ("server", "querier")
    config = attack.Config(rounds=5)
    assert (config.adversary, config.rounds) == ("server", 5)  # the plug-in's default
    assert ATTACKS.get("server-guess") is attack  # known by its own name too


def test_its_own_config_checks_the_parameters_and_each_error_names_its_field(plugin):
    module = plugin("")
    with pytest.raises(ConfigError) as refused:
        parse_suite(suite_with(f"{module}:Server", {"rounds": 0, "round": 2}))
    message = str(refused.value)
    assert "attacks[0].params.rounds: Input should be greater than or equal to 1 (got 0)" in message
    assert "attacks[0].params.round: unknown parameter (did you mean 'rounds'?)" in message
    assert "valid parameters: rounds, adversary" in message
    with pytest.raises(ConfigError, match="attacks\\[0\\].params.adversary: Input should be"):
        parse_suite(suite_with(f"{module}:Server", {"adversary": "client"}))


@pytest.mark.parametrize("how", sandbox.MECHANISMS)
def test_import_time_code_is_fenced_in_the_describer(plugin, tmp_path_factory, monkeypatch, how):
    """The plug-in's import-time code runs only in the fenced describer, under each fence: it
    can neither write beside its own code nor read the runner's files."""
    if not sandbox.works(how):
        pytest.skip(f"this machine cannot fence with {how}")
    monkeypatch.setenv(sandbox.SANDBOX_VARIABLE, how)
    secret = tmp_path_factory.mktemp("runner") / "run.key"
    secret.write_bytes(b"secret")
    module = plugin(
        f"""
        from pathlib import Path
        for attempt in (lambda: Path({str(secret)!r}).read_bytes(),
                        lambda: Path(__file__).with_name("stash").write_text("x")):
            try:
                attempt()
                Path(__file__).with_name("reached").write_text("x")
            except OSError:  # denied (Landlock), absent or read-only (namespaces)
                pass
        """
    )
    parse_suite(suite_with(f"{module}:Server"))
    folder = secret.parent.parent
    assert not list(folder.rglob("stash")) and not list(folder.rglob("reached"))


LIES = {
    "a name 10 000 characters long": "dict(answer('describe'), name='x' * 10000)",
    "an unknown family": "dict(answer('describe'), family='everything')",
    "a field named like pydantic's own": "dict(answer('describe'), fields=['model_dump'])",
    "an answer past 1 MiB": "dict(answer('describe'), pad='x' * (2 << 20))",
    "a pickle": "__import__('pickle').dumps(print)",
}


@pytest.mark.parametrize("lie", LIES.values(), ids=LIES.keys())
def test_a_describer_that_lies_is_refused_in_one_line(plugin, lie):
    """The plug-in's import-time code owns its describer process: it rewrites the answers
    that follow (here, on the parameters). Each lie is refused in one line; nothing it sends
    is unpickled or trusted."""
    module = plugin(
        f"""
        from fgl_workbench.attacks import plugins
        real = plugins._answer
        def answer(what):
            return real({{"describe": __name__ + ":Server"}})
        plugins._answer = lambda question: {lie}
        """
    )
    with pytest.raises(ConfigError) as refused:
        parse_suite(suite_with(f"{module}:Server"))
    heading, problem = str(refused.value).splitlines()  # the suite's heading, one problem
    assert problem.startswith("  attacks[0].params: attack") and "its describer" in problem


def test_a_plugin_that_never_answers_is_given_up_on(plugin, monkeypatch):
    monkeypatch.setattr(plugins, "ANSWER_SECONDS", 3.0)
    module = plugin("import time\ntime.sleep(60)\n")
    with pytest.raises(ConfigError, match="no answer in 3 s"):
        parse_suite(suite_with(f"{module}:Server"))


def test_without_a_fence_a_plugin_is_described_only_when_trusted(plugin, monkeypatch):
    monkeypatch.setattr(sandbox, "mechanism", lambda: None)
    module = plugin("")
    untrusted = {**suite_with(f"{module}:Server"), "trust_plugins": False}
    with pytest.raises(ConfigError, match="cannot sandbox them.*--trust-plugins"):
        parse_suite(untrusted)
    parse_suite(suite_with(f"{module}:Server"))  # trusted: described unfenced
    assert module not in sys.modules


CLIENT = """
class ClientConfig(BaseModel):
    adversary: Literal["client"] = "client"
    client: int = 0
    hops: int = 0

    @model_validator(mode="after")
    def lie(self):
        self.client, self.hops = {client}, {hops}  # whatever the suite said
        return self

""" + zero_scorer("Client", "client-lie", "ClientConfig")


@pytest.mark.parametrize(
    ("client", "hops", "refusal"),
    [
        (-1, 0, "gave client = -1, which the runner cannot use"),  # the last client's view
        (2, 0, "changed client from 0 to 2"),
        (0, 10**12, "gave hops = 1000000000000, which the runner cannot use"),
        (1.5, 0, "gave client = 1.5, which the runner cannot use"),
    ],
)
def test_values_the_runner_reads_are_its_own_to_check(plugin, client, hops, refusal):
    """The third review: a plug-in's config turned ``client: 0`` into -1 (the runner then cut
    the last client's view and asked it about its own records, AUC 0.78 at chance 0.50) or
    ``hops`` into 10^12 (the runner looped for good). Fields the runner reads are checked
    by the runner, and a value the suite gave must come back unchanged."""
    tail = CLIENT.format(client=client, hops=hops)
    module = plugin("from pydantic import model_validator\n", tail)
    with pytest.raises(ConfigError, match=refusal):
        parse_suite(suite_with(f"{module}:Client", {"client": 0}))


STALL = """
import os
import time
from multiprocessing.connection import Connection
real, sent = Connection.send_bytes, []
def send(self, data, *rest):  # its description goes out as it is; the next answer does not
    if not sent:
        sent.append(real(self, data))
        return
    {lie}
Connection.send_bytes = send
"""


@pytest.mark.parametrize(
    ("lie", "refusal"),
    [
        ("os.write(self.fileno(), (1 << 20).to_bytes(4, 'big')); time.sleep(60)", "no answer"),
        ("real(self, b'[' * 50000 + b']' * 50000)", "its describer failed"),
    ],
    ids=["a length, then nothing", "JSON 50 000 deep"],
)
def test_a_describer_that_stalls_or_nests_is_given_up_on(plugin, monkeypatch, lie, refusal):
    """The third review: a describer that sent a length and stalled kept the runner in
    ``recv_bytes`` for good (the poll had returned); an answer nested 50 000 deep was a
    RecursionError traceback. Its description comes first, in time; then it lies."""
    module = plugin(STALL.format(lie=lie))
    ATTACKS.get(f"{module}:Server")  # described, whatever the machine's load
    monkeypatch.setattr(plugins, "ANSWER_SECONDS", 3.0)
    with pytest.raises(ConfigError, match=refusal):
        parse_suite(suite_with(f"{module}:Server"))


def test_plugin_folders_reach_only_fenced_processes(tmp_path, monkeypatch):
    """The third review: with a plug-in's folder on the Python path, a ``pyg_lib.py`` shipped
    beside it ran in the runner (torch_geometric imports it if present) and, through a
    thread, in the worker before its fence (AUC 1.000). Folders in ``FGLWB_PLUGIN_PATH``
    are put on the path of fenced processes only: the runner describes and runs the
    plug-in without ever importing from there."""
    folder = tmp_path / "vendor"
    folder.mkdir()
    (folder / "vendor_attack.py").write_text(HEADER + GOOD)
    marker = tmp_path / "ran"
    (folder / "pyg_lib.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv(sandbox.PLUGIN_PATH_VARIABLE, str(folder))
    monkeypatch.setattr(ATTACKS, "_items", dict(ATTACKS._items))
    monkeypatch.setattr(ATTACKS, "_origins", dict(ATTACKS._origins))
    parse_suite(suite_with("vendor_attack:Server", {"rounds": 2}))
    assert ATTACKS.get("vendor_attack:Server").name == "server-guess"
    assert str(folder) not in sys.path and "vendor_attack" not in sys.modules
    assert not marker.exists()
    monkeypatch.setenv(sandbox.PLUGIN_PATH_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="FGLWB_PLUGIN_PATH: .*missing is not a folder"):
        sandbox.plugin_folders()


UNSAFE = """
class UnsafeConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    {fields}

    def model_dump(self, **kwargs):
        return {{**super().model_dump(**kwargs), **{extra}}}

""" + zero_scorer("Unsafe", "unsafe", "UnsafeConfig")


@pytest.mark.parametrize(
    ("fields", "extra", "refusal"),
    [
        ("pass", "{'adversary': 'server'}", "gave adversary, a field it does not declare"),
        (
            "adversary: Literal['client'] = 'client'\n    client: int | None = None",
            "{}",
            "left client unset",
        ),
    ],
    ids=["an undeclared adversary", "a client left None"],
)
def test_a_config_cannot_pick_the_view_behind_the_suites_back(plugin, fields, extra, refusal):
    """The fourth review: a config without an adversary field whose dump said "server" got
    the server's view for a row stored as the querier's; a curious client left None was a
    traceback in the runner."""
    module = plugin("", UNSAFE.format(fields=fields, extra=extra))
    with pytest.raises(ConfigError, match=refusal):
        parse_suite(suite_with(f"{module}:Unsafe"))
