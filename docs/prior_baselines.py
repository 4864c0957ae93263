"""The prior's feature AUC for the reconstruction suites whose stored rows predate the
``feature_auc_baseline`` metric: it is computed here through the runner's own code path (the
cell's partition, the family's challenge, ``reconstruction_metrics``) without training, since
the prior (the auxiliary pool's mean row) depends on neither the target nor the attack.

    FGLWB_DATA=../shared/data .venv/bin/python docs/prior_baselines.py SUITE.yaml ...
"""

from __future__ import annotations

import sys
from collections import defaultdict

import numpy as np

import fgl_workbench.attacks  # noqa: F401  (registers the attacks the suites name)
from fgl_workbench.attacks.challenges import client_data_challenge, feature_challenge
from fgl_workbench.attacks.metrics import reconstruction_metrics
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.running.cell import partition_cell
from fgl_workbench.running.suite import expand, load_suite
from fgl_workbench.seeding import Streams


def prior_auc(path: str) -> dict[tuple[str, int], list[float]]:
    """(dataset, clients) → the prior's feature AUC for each seed of the suite at ``path``."""
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    done = set()
    datasets = {}
    for cell in expand(load_suite(path)):
        key = (cell.dataset.name, cell.partition.num_clients)
        if (key, cell.seed) in done:
            continue
        done.add((key, cell.seed))
        if cell.dataset.name not in datasets:
            datasets[cell.dataset.name] = load_dataset(cell.dataset.name, cell.dataset.params)
        ds = datasets[cell.dataset.name]
        streams = Streams.public()  # the example suites are reproducible
        federation = build_federation(ds, partition_cell(cell, ds, streams).partition)
        if any(a.name == "feature-inversion" for a in cell.attacks):
            truth = feature_challenge(federation, streams.seed(cell.seed, "feature-challenge"))
        else:
            truth = client_data_challenge(federation, 0)
        prior = ds.data.x.numpy()[federation.partition.aux_ids].mean(0)
        guess = np.tile(prior, (truth.features.shape[0], 1))
        out[key].append(reconstruction_metrics(guess, truth.features, prior)[0]["feature_auc"])
    return out


if __name__ == "__main__":
    for path in sys.argv[1:]:
        for (name, clients), values in prior_auc(path).items():
            print(
                f"{path}  {name}-{clients}: prior AUC {np.mean(values):.3f} ± {np.std(values):.3f}"
            )
