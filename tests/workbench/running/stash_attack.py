"""The second review's stash: a plug-in whose import-time code, wherever it runs unfenced,
starts a thread that waits for the results folder's run key and first stored cell and
stashes them beside its own code, inside the folder its fenced worker may read; its run
rebuilds the membership ground truth from the stash. The test installs it as a package
(``stash_attack/__init__.py`` with ``snoop_attack.py`` beside it) in a folder of its own:
that folder is the plug-in's code."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np

from fgl_workbench.attacks.base import AttackInput, AttackOutput, ThreatModel

from .snoop_attack import OUT_VARIABLE, SnoopConfig, rebuilt_members, stored_cell

STASH = Path(__file__).with_name("stash.json")


def _stash(out: Path) -> None:
    """Polls for a minute: the run key and a stored cell, then both written to ``STASH``."""
    for _ in range(600):
        try:
            key, config = (out / "run.key").read_bytes(), stored_cell(out)
            if config is not None:
                STASH.write_text(json.dumps({"key": key.hex(), "config": config}))
                return
        except Exception:  # not there yet, or fenced: try again
            pass
        time.sleep(0.1)


if os.environ.get(OUT_VARIABLE):
    threading.Thread(target=_stash, args=(Path(os.environ[OUT_VARIABLE]),), daemon=True).start()


class StashCheat:
    """Scores membership from the stash when there is one, at random otherwise; counts
    ``stash_found``."""

    name = "stash-cheat"
    family = "membership"
    threat = ThreatModel(sees="the querier's view", knows="the population graph")
    Config = SnoopConfig

    def run(self, inp: AttackInput, config: SnoopConfig, seed: int) -> AttackOutput:
        ids = np.asarray(inp.candidates.ids)
        try:
            stash = json.loads(STASH.read_text())
        except OSError:
            scores = np.random.default_rng(seed).random(ids.size)
            return AttackOutput(scores, details={"counts": {"stash_found": 0}})
        members = rebuilt_members(stash["config"], bytes.fromhex(stash["key"]))
        scores = np.isin(ids, members).astype(float)
        return AttackOutput(scores, details={"counts": {"stash_found": 1}})
