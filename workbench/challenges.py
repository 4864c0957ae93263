"""Evaluation challenges: the records an attack is asked about, and (kept apart) the truth
used to score it. Only ``Challenge.candidates`` is handed to an attack."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks.base import Candidates
from workbench.data.datasets import NodeDataset
from workbench.data.federation import Federation


@dataclass(frozen=True)
class Challenge:
    candidates: Candidates
    is_member: np.ndarray  # ground truth, for scoring only
    owner: np.ndarray  # client holding each candidate, for per-client scoring only


def membership_challenge(federation: Federation, seed: int) -> Challenge:
    """Members are the clients' training nodes (or graphs); non-members their test ones.
    The order is shuffled so position carries no information."""
    part = federation.partition
    members = np.concatenate([c.train for c in part.clients])
    nonmembers = np.concatenate([c.test for c in part.clients])
    ids = np.concatenate([members, nonmembers])
    truth = np.concatenate([np.ones(members.size, bool), np.zeros(nonmembers.size, bool)])
    owner = np.concatenate(
        [np.full(c.train.size, c.client_id) for c in part.clients]
        + [np.full(c.test.size, c.client_id) for c in part.clients]
    )
    order = np.random.default_rng(seed).permutation(ids.size)
    ids, truth, owner = ids[order], truth[order], owner[order]
    ds = federation.dataset
    graphs = () if isinstance(ds, NodeDataset) else tuple(ds.graphs[i] for i in ids.tolist())
    return Challenge(Candidates(ds.level, ids, ds.labels[ids], graphs), truth, owner)
