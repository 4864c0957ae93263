"""Class statistics as the server received them: a client's last upload in the clear (the
format is the targets', ``fgl_workbench.targets.class_statistics``), or why there is none."""

from __future__ import annotations

from fgl_workbench.adversary.threat import ServerView
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.class_statistics import ClassStatistics
from fgl_workbench.transcript import CIPHERTEXT, CLASS_STATISTICS


def uploaded_statistics(view: ServerView, sender: str) -> ClassStatistics | None:
    """The last class statistics ``sender`` uploaded in the clear, if any."""
    payload = view.last_payload(sender, CLASS_STATISTICS)
    sealed = any(m.sender == sender and m.kind == CIPHERTEXT for m in view.received)
    if payload is None and sealed:  # metadata suffices: a stripped ciphertext was still sent
        raise NotApplicableError("encrypted (secure aggregation: the server sees only sums)")
    return None if payload is None else ClassStatistics.from_payload(payload)
