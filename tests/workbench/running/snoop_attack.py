"""Plug-in attacks that look for what they should never reach. ``Snoop`` searches every
object the garbage collector tracks and every frame above it for a trained target or a
federation, and reports how many it found as its score and as a count. ``Cheat`` goes to the
disk: the runner's /proc entries, the results folder (run key, database, snapshot) and the
data root; with the run key and the stored cell it rebuilds the membership ground truth."""

from __future__ import annotations

import gc
import inspect
import json
import os
import socket
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from fgl_workbench.attacks.base import AttackInput, AttackOutput, ThreatModel
from fgl_workbench.data.catalog import data_root
from fgl_workbench.data.federation import Federation
from fgl_workbench.running.cell import cell_dataset, partition_cell
from fgl_workbench.running.suite import Cell, DatasetEntry, PartitionEntry, TargetEntry
from fgl_workbench.seeding import Streams
from fgl_workbench.targets.base import TrainedTarget


class SnoopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


def reachable_secrets() -> int:
    with warnings.catch_warnings():  # some tracked objects warn when their type is asked
        warnings.simplefilter("ignore")
        found = sum(isinstance(o, TrainedTarget | Federation) for o in gc.get_objects())
    for frame in inspect.stack():
        found += sum(
            isinstance(v, TrainedTarget | Federation) for v in frame.frame.f_locals.values()
        )
    return found


class Snoop:
    name = "snoop"
    family = "membership"
    threat = ThreatModel(sees="the querier's view", knows="the population graph")
    Config = SnoopConfig

    def run(self, inp: AttackInput, config: SnoopConfig, seed: int) -> AttackOutput:
        found = reachable_secrets()
        scores = np.full(len(inp.candidates.ids), float(found))
        # and, beside the secrets, the torch-function modes its worker runs under (a
        # default-device mode slows every torch call)
        modes = torch._C._len_torch_function_stack()
        counts = {"secrets_reachable": found, "torch_function_modes": modes}
        return AttackOutput(scores, details={"counts": counts})


OUT_VARIABLE = "SNOOP_OUT"  # the test says where the results folder is (else /proc/PPID)
# and the runner's pid, which a worker in its own PID namespace cannot learn from getppid()
RUNNER_VARIABLE = "SNOOP_RUNNER"
REACHES = ("cmdline", "environ", "mem", "run_key", "results", "snapshot", "data_root")
# where the test listens, as a runner-side accomplice would: a TCP port, an abstract socket
PORT_VARIABLE, SOCKET_VARIABLE = "SNOOP_PORT", "SNOOP_SOCKET"
CALLS = ("tcp", "abstract_socket")


def _reach(out: Path) -> dict[str, Callable[[], object]]:
    """Each thing a cheating plug-in opens: the runner's /proc entries, the results folder's
    run key, database and snapshot, and the data root."""
    parent = f"/proc/{os.environ.get(RUNNER_VARIABLE) or os.getppid()}"
    return {
        "cmdline": lambda: Path(parent, "cmdline").read_bytes(),
        "environ": lambda: Path(parent, "environ").read_bytes(),
        "mem": lambda: open(Path(parent, "mem"), "rb").close(),  # noqa: SIM115
        "run_key": lambda: (out / "run.key").read_bytes(),
        "results": lambda: (out / "results.sqlite").read_bytes()[:16],
        "snapshot": lambda: next((out / "targets").iterdir()).read_bytes()[:16],
        "data_root": lambda: os.listdir(data_root()),
        "tcp": lambda: _connect(socket.AF_INET, ("127.0.0.1", int(os.environ[PORT_VARIABLE]))),
        "abstract_socket": lambda: _connect(socket.AF_UNIX, "\0" + os.environ[SOCKET_VARIABLE]),
    }


def _connect(family: int, address: object) -> None:
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(address)


def _read_at_import() -> str:
    """What this module's import-time code made of the run key where it was imported: a
    plug-in's worker imports it once fenced, so there it must be "denied"."""
    out = os.environ.get(OUT_VARIABLE)
    try:
        (Path(out) / "run.key").read_bytes() if out else None
    except PermissionError:
        return "denied"
    except OSError:
        return "absent"
    return "read" if out else "absent"


AT_IMPORT = _read_at_import()


def stored_cell(out: Path) -> str | None:
    """The first stored cell's configuration (JSON), read from the results folder."""
    db = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT config_json FROM cells").fetchone()
    finally:
        db.close()
    return None if row is None else row[0]


def rebuilt_members(config: str, key: bytes) -> np.ndarray:
    """The ground truth rebuilt from disk, as the issue's proof did: the stored cell's
    configuration and the run key give the partition, whose training nodes are the members."""
    c = json.loads(config)
    cell = Cell(
        DatasetEntry(**c["dataset"]),
        PartitionEntry(**c["partition"]),
        TargetEntry(**c["target"]),
        c["seed"],
        (),
    )
    dataset = cell_dataset(cell, None, torch.device("cpu"))
    partition = partition_cell(cell, dataset, Streams(key)).partition
    return np.concatenate([client.train for client in partition.clients])


class Cheat:
    """Reads the disk for the ground truth; scores membership from it when it can, at random
    otherwise. Counts ``denied_<what>`` (1: PermissionError) and ``reached_<what>`` (1: read
    or connected) for each thing it tried."""

    name = "cheat"
    family = "membership"
    threat = ThreatModel(sees="the querier's view", knows="the population graph")
    Config = SnoopConfig

    def run(self, inp: AttackInput, config: SnoopConfig, seed: int) -> AttackOutput:
        out = Path(os.environ[OUT_VARIABLE])
        got, counts = {}, {}
        for what, read in _reach(out).items():
            counts[f"denied_{what}"] = 0
            try:
                got[what] = read()
            except PermissionError:  # Landlock's answer
                counts[f"denied_{what}"] = 1
            except OSError:  # not there at all: the namespaces' new root and empty network
                pass
            counts[f"reached_{what}"] = int(what in got)
        counts["denied_at_import"] = int(AT_IMPORT == "denied")
        counts["reached_at_import"] = int(AT_IMPORT == "read")
        ids = np.asarray(inp.candidates.ids)
        if "run_key" in got and "results" in got:
            members = rebuilt_members(stored_cell(out), got["run_key"])
            scores = np.isin(ids, members).astype(float)
        else:
            scores = np.random.default_rng(seed).random(ids.size)
        return AttackOutput(scores, details={"counts": counts})


MARKER_VARIABLE = "SNOOP_MARKER"  # the test says where the planted object's marker goes


class _Planted:
    """Unpickled, it creates the marker file: code a worker would run in the runner."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


class PickleCheat:
    """Returns scores that, unpickled in the runner, run code there (the fence left behind)."""

    name = "pickle-cheat"
    family = "membership"
    threat = ThreatModel(sees="the querier's view", knows="the population graph")
    Config = SnoopConfig

    def run(self, inp: AttackInput, config: SnoopConfig, seed: int) -> AttackOutput:
        planted = np.empty(len(inp.candidates.ids), dtype=object)
        planted[:] = [_Planted(os.environ[MARKER_VARIABLE])] * planted.size
        return AttackOutput(planted)
