"""Third-party attacks run in a fenced worker process of their own.

A plug-in attack is code the workbench did not write. In the runner's process it could walk
up the stack or through the garbage collector to the trained target, the federation and the
scorers' ground truth; in a spawned worker it holds exactly what was sent: the pickled view,
knowledge and candidates, its config and seed. Reference models are trained afresh in the
worker from the same stream.

On disk the worker is fenced by the kernel (``fgl_workbench.sandbox``: Landlock, else
namespaces): before it receives
the view it can no longer open the results folder, ``run.key``, snapshots, the data root or
the runner's ``/proc`` entries. Where the kernel cannot fence it, a plug-in runs only when
the user trusts it (``--trust-plugins``), and its row says so. The plug-in's code is
imported only in fenced processes (this worker, once fenced, and the describer of
``fgl_workbench.attacks.plugins``), never in the runner."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import torch
from pydantic import BaseModel

from fgl_workbench import sandbox
from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.attacks.plugins import (
    TRUSTED,
    PluginAttack,
    fence,
    imported,
    kept_environment,
    readable_for,
    stop_describer,
    trusting,
)
from fgl_workbench.device import adopt_device
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.running import returned
from fgl_workbench.running.returned import ReturnError
from fgl_workbench.seeding import seed_everything


def isolated(name: str) -> bool:
    """Whether attack ``name`` runs in a worker: every plug-in (an entry point or a module
    reference, held here as a ``PluginAttack``)."""
    return isinstance(ATTACKS.get(name), PluginAttack)


def admit(names: Iterable[str], trusted: bool, protected: Iterable[Path]) -> None:
    """Checked before a run starts: the suite's plug-ins can be fenced (or are trusted), and
    no ``protected`` folder (results folder, data root) lies inside what a fenced plug-in
    may read."""
    with trusting(trusted):
        plugins = [ATTACKS.get(name).reference for name in names if isolated(name)]
    if plugins and fence(trusted) != TRUSTED:
        sandbox.check_fenced_off(readable_for(plugins), protected)


def run_isolated(
    name: str, inp: AttackInput, config: BaseModel, seed: int, trusted: bool
) -> tuple[AttackOutput, str]:
    """Plug-in ``name`` run on ``inp`` in a spawned worker process, fenced where the kernel
    can; returns its output and how it was fenced (``fence``). The worker gets its input as
    one pickle (runner to worker only) and hands back data alone
    (``fgl_workbench.running.returned``): nothing it sends is unpickled here."""
    recorded = fence(trusted)
    reference = ATTACKS.get(name).reference
    pool_seed = None if inp.references is None else inp.references.seed
    try:  # plain pickle: tensors travel as bytes, not as shared memory the worker reaches back
        payload = pickle.dumps(
            (replace(inp, references=None), config.model_dump(), seed, pool_seed)
        )
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise NotApplicableError(
            f"{name}: its view cannot be sent to a plug-in's worker process ({exc})"
        ) from None
    context = multiprocessing.get_context("spawn")
    scratch = tempfile.mkdtemp(prefix="fglwb-plugin-")
    device = torch.get_default_device()  # the cell's: the view's tensors live there
    readable = None if recorded == TRUSTED else readable_for([reference])
    how = None if readable is None else sandbox.chosen()
    work = (reference, str(device), scratch, payload)
    start = (readable, how, scratch, kept_environment(), device.type == "cuda", WORK, work)
    worker = context.Process(target=sandbox.run_fenced, args=start)
    stop_describer()
    try:
        with sandbox.undumpable():
            worker.start()
            _wait(worker, plugin_seconds())
            if worker.exitcode is None:
                raise ReturnError(f"{name}: no output within {plugin_seconds():.0f} s")
        return returned.read_output(Path(scratch), name), recorded
    finally:
        worker.kill()
        sandbox.kill_session(worker.pid)  # whatever it started, too
        shutil.rmtree(scratch, ignore_errors=True)


def _wait(worker: multiprocessing.process.BaseProcess, seconds: float) -> None:
    """Until the worker itself ends (or ``seconds`` pass): its exit status, polled, not
    ``join``, whose pipe a process the plug-in started and left running holds open."""
    deadline = time.monotonic() + seconds
    while worker.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.05)


WORK = "fgl_workbench.running.isolated:_work"
SECONDS_VARIABLE = "FGLWB_PLUGIN_SECONDS"


def plugin_seconds() -> float:
    """How long a plug-in's run may take (``FGLWB_PLUGIN_SECONDS``, default an hour)."""
    text = os.environ.get(SECONDS_VARIABLE, "3600")
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 1e7:
        raise ConfigError(f"{SECONDS_VARIABLE}: expected seconds in (0, 1e7) (got {text!r})")
    return seconds


def _work(refused: str | None, reference: str, device: str, scratch: str, payload: bytes) -> None:
    """The worker's life once fenced (``sandbox.run_fenced``; ``refused``: it could not be):
    only now is the plug-in imported, so its import-time code runs fenced too; its output
    or its failure is written into ``scratch`` as data."""
    folder = Path(scratch)
    try:
        if refused is not None:
            raise sandbox.SandboxError(refused)
        inp, params, seed, pool_seed = pickle.loads(payload)
        adopt_device(torch.device(device))
        attack = imported(reference)
        seed_everything(seed)
        with ReferencePool(1, pool_seed or 0) as pool:
            given = inp if pool_seed is None else replace(inp, references=pool)
            out = attack.run(given, attack.Config(**params), seed)
        returned.write_output(out, folder)
    except Exception as exc:  # every failure goes back as one line, never as an object
        returned.write_failure(exc, folder)
