"""Each target's accuracy gain over a baseline target, paired by seed: cells that share the
dataset, partition and seed share the partition draw, so their difference removes the
partition's variance, which dominates the spread of small federations.

    .venv/bin/python docs/paired_gain.py runs/fedtad-table2 [--base fedavg]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np

from fgl_workbench.reports.summary import cell_labels, mean_interval, natural_key
from fgl_workbench.storage.store import ResultsStore


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("--base", default="fedavg", help="the baseline target's name")
    args = parser.parse_args()
    cells = ResultsStore(args.run).cells()
    labels = cell_labels(cells)
    base: dict[tuple, float] = {}
    others: dict[str, dict[tuple, float]] = defaultdict(dict)
    for c in cells:
        key = (c.config["dataset"]["name"], json.dumps(c.config["partition"]), c.config["seed"])
        accuracy = 100 * c.utility["accuracy"]
        if c.config["target"]["name"] == args.base and not c.config["target"].get("defenses"):
            base[key] = accuracy
        else:
            others[labels[c.cell_id].replace(f"/seed{key[2]}", "")][key] = accuracy
    print(f"| setting | seeds | gain over {args.base} (points) | 95% CI | seeds with a gain |")
    print("|---|---:|---:|---|---:|")
    for label in sorted(others, key=natural_key):
        gains = np.array([a - base[k] for k, a in others[label].items() if k in base])
        if gains.size == 0:
            continue
        low, high = mean_interval(list(gains))
        spread = gains.std(ddof=1) if gains.size > 1 else 0.0
        print(
            f"| {label} | {gains.size} | {gains.mean():+.2f} ± {spread:.2f} "
            f"| [{low:+.2f}, {high:+.2f}] | {(gains > 0).sum()}/{gains.size} |"
        )


if __name__ == "__main__":
    main()
