"""Third-party attacks run in a worker process of their own.

A plug-in attack is code the workbench did not write. In the runner's process it could walk
up the stack or through the garbage collector to the trained target, the federation and the
scorers' ground truth; in a spawned worker it holds exactly what was sent: the pickled view,
knowledge and candidates, its config and seed. Reference models are trained afresh in the
worker from the same stream. (A worker still runs as the user: it can read files the user
can. Run plug-ins you trust with data you would show them.)"""

from __future__ import annotations

import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import torch
from pydantic import BaseModel

from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.membership.reference import ReferencePool
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.registry import BUILT_IN
from fgl_workbench.seeding import seed_everything


def isolated(name: str) -> bool:
    """Whether attack ``name`` runs in a worker: every attack not built in (registered as
    built-in and defined in the workbench's own ``attacks`` package). A plug-in's import-time
    code runs in the runner when the registry loads it; only its ``run`` is isolated."""
    own = type(ATTACKS.get(name)).__module__.startswith("fgl_workbench.attacks.")
    return ATTACKS.origin(name) != BUILT_IN or not own


def run_isolated(name: str, inp: AttackInput, config: BaseModel, seed: int) -> AttackOutput:
    """``ATTACKS.get(name).run(inp, config, seed)`` in a spawned worker process."""
    pool_seed = None if inp.references is None else inp.references.seed
    sent = replace(inp, references=None)
    try:
        pickle.dumps(sent)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise NotApplicableError(
            f"{name}: its view cannot be sent to a plug-in's worker process ({exc})"
        ) from None
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as worker:
        device = torch.get_default_device()  # the cell's: the view's tensors live there
        job = worker.submit(_run, name, sent, config.model_dump(), seed, pool_seed, device)
        return job.result()


def _run(
    name: str,
    inp: AttackInput,
    params: dict,
    seed: int,
    pool_seed: int | None,
    device: torch.device,
) -> AttackOutput:
    torch.set_default_device(device)
    attack = ATTACKS.get(name)
    seed_everything(seed)
    with ReferencePool(1, pool_seed or 0) as pool:
        given = inp if pool_seed is None else replace(inp, references=pool)
        return attack.run(given, attack.Config(**params), seed)
