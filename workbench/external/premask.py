"""What each node of a user's SecAgg+ app uploaded before ``secaggplus_mod`` masked it, kept
out of band for the auditor.

Under SecAgg+ the server receives masked vectors only, so nothing it holds shows that
``LocalDpMod`` ran on them (a mod held but never run, or skipped in a round, looks the same
from there). The recorder's client wrapper keeps the vector Flower's SecAgg+ client stage is
handed (after every mod inside ``secaggplus_mod``, LocalDpMod's noise included) in the
recorder's folder, and the recorder runs its noise checks on it. No attack reads it: it is
not what any adversary saw."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.common import parameters_to_ndarrays

# Flower's SecAgg+ client: ``secaggplus_mod`` (and ``secagg_mod``, which calls it) hands the
# trained parameters to this function, which quantises and masks them
SECAGGPLUS_MODULE = "flwr.client.mod.secure_aggregation.secaggplus_mod"
STAGE = "_collect_masked_vectors"

_keep: ContextVar[Callable[[list[np.ndarray]], None] | None] = ContextVar(
    "fglwb_premask_keep", default=None
)
_install_lock = threading.Lock()


def _install() -> None:
    """Route Flower's masking stage through ``_keep`` once per process. A call outside a
    recorded node (``_keep`` unset) goes through unchanged; a context variable, not a patch
    set and undone per call, so that nodes run in threads never undo each other's."""
    module = importlib.import_module(SECAGGPLUS_MODULE)
    with _install_lock:
        real = getattr(module, STAGE)
        if getattr(real, "keeps_premask", False):
            return

        def collect(state: Any, configs: Any, num_examples: int, parameters: Any) -> Any:
            keep = _keep.get()
            if keep is not None:
                keep(parameters_to_ndarrays(parameters))
            return real(state, configs, num_examples, parameters)

        collect.keeps_premask = True  # type: ignore[attr-defined]
        setattr(module, STAGE, collect)


class PreMaskClientApp(ClientApp):
    """``inner``, each node keeping in ``folder`` the parameters it hands SecAgg+ to mask,
    one file per node and round (Flower's legacy workflows stamp the round as the group
    id)."""

    def __init__(self, inner: ClientApp, folder: str | Path) -> None:
        super().__init__()
        self.inner, self.folder = inner, Path(folder)

    def __call__(self, message: Message, context: Context) -> Message:
        _install()
        group = message.metadata.group_id
        if not group.isdigit():  # no round to file it under: left unkept, so unchecked
            return self.inner(message, context)
        # the time orders one node's vectors as its masked uploads are ordered in the
        # transcript (a main may run its rounds twice; a node's calls may land on different
        # simulation actors, so no counter in this object would do)
        stem = f"{int(context.node_id)}-{int(group)}"

        def keep(arrays: list[np.ndarray]) -> None:
            np.savez(self.folder / f"{stem}-{time.time_ns()}.npz", *arrays)

        token = _keep.set(keep)
        try:
            return self.inner(message, context)
        finally:
            _keep.reset(token)


def kept_uploads(folder: str | Path) -> dict[int, list[tuple[int, list[np.ndarray]]]]:
    """Node id → (round counted from 0, the arrays it handed SecAgg+) in the order it handed
    them. Read without pickle (the nodes are the user's code)."""
    kept: dict[int, list[tuple[int, int, list[np.ndarray]]]] = {}
    for path in Path(folder).glob("*.npz"):
        parts = path.stem.split("-")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            continue
        node, group, when = (int(p) for p in parts)
        with np.load(path, allow_pickle=False) as arrays:
            vector = [arrays[f"arr_{i}"] for i in range(len(arrays))]
        kept.setdefault(node, []).append((when, group - 1, vector))
    return {
        node: [(r, v) for _, r, v in sorted(rows, key=lambda x: x[0])]
        for node, rows in kept.items()
    }
