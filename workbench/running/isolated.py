"""Third-party attacks run in a fenced worker process of their own.

A plug-in attack is code the workbench did not write. In the runner's process it could walk
up the stack or through the garbage collector to the trained target, the federation and the
scorers' ground truth; in a spawned worker it holds exactly what was sent: the pickled view,
knowledge and candidates, its config and seed. Reference models are trained afresh in the
worker from the same stream.

On disk the worker is fenced by the kernel (``fgl_workbench.sandbox``: Landlock, else namespaces):
before it receives the view it can no longer open the results folder, ``run.key``,
snapshots, the data root or the runner's ``/proc`` entries. Where the kernel cannot fence
it, a plug-in runs only when the user trusts it (``--trust-plugins``), and its row says so.
The worker imports the plug-ins only once fenced, so their import-time code is fenced there;
the registry also imports them in the runner (to check a suite), where that code runs
unfenced, as any installed package's does: install plug-ins you would run."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import torch
from pydantic import BaseModel

from fgl_workbench import sandbox
from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.registry import BUILT_IN
from fgl_workbench.running import returned
from fgl_workbench.seeding import seed_everything

TRUSTED = "trusted without sandbox"


def isolated(name: str) -> bool:
    """Whether attack ``name`` runs in a worker: every attack not built in (registered as
    built-in and defined in the workbench's own ``attacks`` package). A plug-in's import-time
    code runs in the runner when the registry loads it; only its ``run`` is isolated."""
    own = type(ATTACKS.get(name)).__module__.startswith("fgl_workbench.attacks.")
    return ATTACKS.origin(name) != BUILT_IN or not own


def fence(trusted: bool) -> str:
    """How a plug-in runs here, as its row records it: the kernel's fence, or trusted
    without one. Refused (one line) where there is no fence and the user did not say
    ``--trust-plugins``."""
    mechanism = sandbox.mechanism()
    if mechanism is not None:
        return f"sandboxed ({mechanism})"
    if trusted:
        return TRUSTED
    raise ConfigError(
        "plug-in attacks: this kernel cannot sandbox them (no Landlock, no user namespaces) "
        f"or {sandbox.SANDBOX_VARIABLE}=none says not to; pass "
        "--trust-plugins (suite: trust_plugins: true) to run them unfenced"
    )


def admit(names: Iterable[str], trusted: bool, protected: Iterable[Path]) -> None:
    """Checked before a run starts: the suite's plug-ins can be fenced (or are trusted), and
    no ``protected`` folder (results folder, data root) lies inside what a fenced plug-in
    may read."""
    names = list(names)
    if not any(isolated(name) for name in names):
        return
    if fence(trusted) != TRUSTED:
        readable = sandbox.readable_paths() + sandbox.plugin_paths(ATTACKS.group, names)
        sandbox.check_fenced_off(readable, protected)


def run_isolated(
    name: str, inp: AttackInput, config: BaseModel, seed: int, trusted: bool
) -> tuple[AttackOutput, str]:
    """``ATTACKS.get(name).run(inp, config, seed)`` in a spawned worker process, fenced where
    the kernel can; returns its output and how it was fenced (``fence``). The worker gets
    its input as one pickle (runner to worker only) and hands back data alone
    (``fgl_workbench.running.returned``): nothing it sends is unpickled here."""
    how = fence(trusted)
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
    with tempfile.TemporaryDirectory(prefix="fglwb-plugin-") as scratch, sandbox.undumpable():
        readable = None
        if how != TRUSTED:  # the plug-ins' own code too: the worker imports them fenced
            readable = sandbox.readable_paths() + sandbox.plugin_paths(ATTACKS.group, [name])
        device = torch.get_default_device()  # the cell's: the view's tensors live there
        start = (name, readable, sandbox.chosen(), scratch, device, _kept_environment(), payload)
        worker = context.Process(target=_worker, args=start)
        worker.start()
        worker.join()
        return returned.read_output(Path(scratch), name), how


# what a plug-in's worker keeps of the runner's environment (no tokens, no paths it set),
# besides the CUDA_* settings and the names the user lists in PLUGIN_ENVIRONMENT
PLUGIN_ENVIRONMENT = "FGLWB_PLUGIN_ENV"
KEPT_ENVIRONMENT = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)


def _kept_environment() -> dict[str, str]:
    """The runner's environment as a plug-in's worker gets it."""
    listed = {n.strip() for n in os.environ.get(PLUGIN_ENVIRONMENT, "").split(",") if n.strip()}
    keep = set(KEPT_ENVIRONMENT) | listed
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("CUDA")}


def _worker(
    name: str,
    readable: list[Path] | None,
    how: str | None,
    scratch: str,
    device: torch.device,
    environment: dict[str, str],
    payload: bytes,
) -> None:
    """The worker's whole life: a GPU initialised (the driver opens its device files now),
    the environment replaced by ``environment`` (``_kept_environment``), the fence
    (``how``, chosen in the runner; ``readable`` None: trusted, unfenced) with ``scratch`` as
    its only writable folder, and
    only then the plug-ins
    imported, so their import-time code runs fenced too; its output or its failure is
    written into ``scratch`` as data."""
    folder = Path(scratch)
    try:
        if device.type == "cuda":
            torch.zeros(1, device=device)  # a context on the GPU: its device files open now
        os.environ.clear()
        os.environ.update(environment, TMPDIR=scratch)
        tempfile.tempdir = scratch
        if readable is not None:
            sandbox.enter(readable, [folder, *map(Path, sandbox.DEVICES_RW)], how)
        inp, params, seed, pool_seed = pickle.loads(payload)
        torch.set_default_device(device)
        attack = ATTACKS.get(name)
        seed_everything(seed)
        with ReferencePool(1, pool_seed or 0) as pool:
            given = inp if pool_seed is None else replace(inp, references=pool)
            out = attack.run(given, attack.Config(**params), seed)
        returned.write_output(out, folder)
    except Exception as exc:  # every failure goes back as one line, never as an object
        returned.write_failure(exc, folder)
