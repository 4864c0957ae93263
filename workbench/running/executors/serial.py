"""Cells one after another in this process (with the caller's intra-op thread count), the
progress bar naming each one's stage."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from fgl_workbench.progress import Progress
from fgl_workbench.running.cell import CellJob, run_job


def run_serially(jobs: list[CellJob], out_dir: str | Path, progress: Progress) -> None:
    for job in jobs:
        run_job(job, out_dir, on_stage=partial(progress.stage, job.cell.label))
        progress.finished(job.cell.label)
