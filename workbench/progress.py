"""The suite's progress bar, shared by every executor."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tqdm.auto import tqdm

RoundHook = Callable[[int, int, dict[str, float]], None]
_ROUNDS: ContextVar[RoundHook | None] = ContextVar("round_hook", default=None)


def report_round(done: int, total: int, **values: float) -> None:
    """Targets call this once per training round (``done`` of ``total``, with what they
    computed anyway: validation accuracy, a loss), so a cell that trains for minutes shows
    where it is; a no-op unless a caller listens (``listening_to_rounds``)."""
    hook = _ROUNDS.get()
    if hook is not None:
        hook(done, total, values)


@contextmanager
def listening_to_rounds(hook: RoundHook) -> Iterator[None]:
    token = _ROUNDS.set(hook)
    try:
        yield
    finally:
        _ROUNDS.reset(token)


def round_text(done: int, total: int, values: dict[str, float]) -> str:
    """'round 12/100, val_accuracy 0.712'."""
    shown = "".join(f", {k} {v:.3g}" for k, v in values.items())
    return f"round {done}/{total}{shown}"


class Progress:
    """The suite's progress bar: cells done of pending, elapsed and ETA, and what is running
    (the serial executor names the cell's stage: partition, train, each attack). Cells may
    finish on another thread (the process executor's), so updates hold a lock."""

    def __init__(self, total: int, name: str, quiet: bool) -> None:
        self._lock = threading.Lock()
        self.bar = tqdm(
            total=total,
            disable=quiet,
            desc=name,
            unit="cell",
            bar_format="{desc}: {n}/{total} cells |{bar:20}| {elapsed}<{remaining}{postfix}",
        )

    def stage(self, label: str, stage: str) -> None:
        with self._lock:
            self.bar.set_postfix_str(f"{label}: {stage}")

    def finished(self, label: str, running: int = 0) -> None:
        busy = f", {running} running" if running else ""
        with self._lock:
            self.bar.set_postfix_str(f"done: {label}{busy}", refresh=False)
            self.bar.update()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()
