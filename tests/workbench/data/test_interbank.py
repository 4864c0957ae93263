"""The synthetic interbank transactions: deterministic, every bank a client, planted motifs
labelled illicit, a temporal split, and the 'given' partition that makes banks clients."""

import numpy as np
import pytest
import torch

from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.interbank import InterbankParams, interbank
from fgl_workbench.data.partition import make_partition
from fgl_workbench.errors import ConfigError

SMALL = InterbankParams(num_banks=4, num_accounts=400, num_transactions=2000, patterns=30)


def test_same_seed_same_graph_and_the_parts_fit():
    a, b = interbank(SMALL), interbank(SMALL)
    assert torch.equal(a.edge_task.index, b.edge_task.index)
    assert torch.equal(a.data.x, b.data.x)
    task = a.edge_task
    m = task.index.shape[1]
    assert task.attr.shape == (m, 3) and task.y.shape == task.split.shape == (m,)
    assert int((task.y == 0).sum()) == SMALL.num_transactions
    assert 3 * 30 <= int(task.y.sum()) <= 2 * 7 * 30  # 30 motifs of 3 to 14 transfers
    assert torch.equal(torch.unique(a.data.group), torch.arange(4))


def test_illicit_transfers_are_the_motif_accounts_and_split_by_time():
    ds = interbank(SMALL)
    task = ds.edge_task
    involved = torch.zeros(ds.num_items, dtype=torch.bool)
    involved[task.index[:, task.y == 1].reshape(-1)] = True
    assert torch.equal(involved.long(), ds.data.y)
    # sorted by time: the split only moves forward (train, then validation, then test)
    assert (torch.diff(task.split) >= 0).all()
    assert set(task.split.tolist()) == {0, 1, 2}
    # every transfer is an edge of the (undirected) message-passing graph
    edges = set(map(tuple, ds.data.edge_index.T.tolist()))
    assert all((u, v) in edges for u, v in task.index.T.tolist() if u != v)


def test_the_given_partition_makes_each_bank_a_client():
    ds = load_dataset("interbank", SMALL.model_dump())
    part = make_partition(ds, "given", 4, 0, aux_fraction=0.1)
    group = ds.data.group.numpy()
    for c in part.clients:
        assert (group[c.ids] == c.client_id).all()
    assert sum(c.ids.size for c in part.clients) + part.aux_ids.size == ds.num_items
    with pytest.raises(ConfigError, match="assigns its nodes to 4 clients"):
        make_partition(ds, "given", 3, 0)
    with pytest.raises(ConfigError, match="'given' needs a dataset"):
        make_partition(load_dataset("csbm"), "given", 2, 0)
    assert np.isclose(ds.edge_task.y.float().mean(), 0.05, atol=0.04)
