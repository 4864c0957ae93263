"""The suite's progress bar, shared by every executor."""

from __future__ import annotations

import threading

from tqdm import tqdm


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
