"""FedGC's checkpoints, validation against test: trains each FedGC cell of a suite (the
suite's partition and seeds, so the cells a run of it stores; no attacks, nothing stored)
and prints, per G' checkpoint, the validation accuracy the workbench selects on and the
clients' fine-tuned test accuracy the official code selects on; then, per horizon, what each
rule reports. The gap between the two rules is what selecting on test adds to the paper's
Table 1; the horizons show what more rounds add.

    cd docs && FGLWB_DATA=../../shared/data ../.venv/bin/python fedgc_checkpoints.py \\
        ../examples/reproduction/fedgc-rounds.yaml
"""

from __future__ import annotations

import argparse

import torch

from fgl_workbench.data.federation import build_federation
from fgl_workbench.progress import listening_to_rounds
from fgl_workbench.running.cell import cell_dataset, partition_cell
from fgl_workbench.running.suite import Cell, expand, load_suite
from fgl_workbench.seeding import Streams
from fgl_workbench.targets import TARGETS

Checkpoint = tuple[int, float, float]  # (round, validation accuracy, test accuracy)


def cell_checkpoints(cell: Cell, streams: Streams, data_root: str | None) -> list[Checkpoint]:
    """Trains one FedGC cell as a run of its suite does, recording each checkpoint."""
    dataset = cell_dataset(cell, data_root, torch.device("cpu"))
    federation = build_federation(dataset, partition_cell(cell, dataset, streams).partition)
    target = TARGETS.get("fedgc")
    rows: list[Checkpoint] = []

    def record(done: int, total: int, values: dict[str, float]) -> None:
        if "test_accuracy" in values:
            rows.append((done, values["val_accuracy"], values["test_accuracy"]))
            print(f"{cell.label} round {done}: val {rows[-1][1]:.3f} test {rows[-1][2]:.3f}")

    config = target.Config(**cell.target.params)
    with listening_to_rounds(record):
        target.fit(federation, config, [], streams.seed(cell.seed, "target"))
    return rows


def checkpoints(path: str) -> dict[str, list[Checkpoint]]:
    """Every FedGC cell's checkpoints, by cell label: the cells without defenses (a defense's
    calibration and wiring belong to the runner; the IB rows are not what this measures)."""
    suite = load_suite(path)
    if not suite.reproducible:
        raise SystemExit(
            f"{path}: reproducible: false draws a secret run key, so no run of it "
            "has these cells; use a reproducible suite"
        )
    cells = [c for c in expand(suite) if c.target.name == "fedgc"]
    for cell in cells:
        if cell.target.defenses:
            print(f"skipped {cell.label}: it has defenses")
    return {
        cell.label: cell_checkpoints(cell, Streams.public(), suite.data_root)
        for cell in cells
        if not cell.target.defenses
    }


def selected(rows: list[Checkpoint], horizon: int) -> tuple[Checkpoint, Checkpoint]:
    """The checkpoints up to ``horizon`` chosen on validation and on test (first of ties)."""
    upto = [r for r in rows if r[0] <= horizon]
    return max(upto, key=lambda r: r[1]), max(upto, key=lambda r: r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("--horizons", type=int, nargs="+", default=[500, 1000])
    args = parser.parse_args()
    found = checkpoints(args.suite)
    print("\n| cell | rounds | on validation: round, test % | on test: round, test % |")
    print("|---|---:|---|---|")
    for label, rows in found.items():
        for horizon in args.horizons:
            by_val, by_test = selected(rows, horizon)
            print(
                f"| {label} | {horizon} | {by_val[0]}, {100 * by_val[2]:.1f} "
                f"| {by_test[0]}, {100 * by_test[2]:.1f} |"
            )


if __name__ == "__main__":
    main()
