"""A small synthetic interbank transaction graph: an embedded stand-in for the AML data of
CE-FedGNN (IBM's HI/LI transactions, millions of edges and a Kaggle download).

Accounts belong to banks (``data.group``: the ``given`` partition makes each bank a client);
licit transfers follow heavy-tailed account activity and stay inside the sender's bank with
probability ``same_bank``; laundering is planted as the motifs of Altman et al. (2023):
fan-out, fan-in, cycles and scatter-gather, across banks, with structured amounts (a sum
split evenly, a few percent skimmed per hop) at any hour. The task is to classify the
transactions (``edge_task``: illicit or not) with a temporal split, as the paper does; node
labels mark the accounts that took part in laundering. The illicit share (a few percent) is
far above IBM's 0.1 %, so that a graph this small has positives to learn from."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from fgl_workbench.data.datasets import EdgeTask, NodeDataset

MOTIFS = ("fan-out", "fan-in", "cycle", "scatter-gather")


class InterbankParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    num_banks: int = Field(8, ge=1, le=256)
    num_accounts: int = Field(3000, ge=20, le=1_000_000)
    num_transactions: int = Field(20000, ge=10, le=10_000_000, description="licit ones")
    patterns: int = Field(150, ge=0, le=1_000_000, description="planted laundering motifs")
    days: int = Field(20, ge=4, le=10_000)
    same_bank: float = Field(0.7, ge=0.0, le=1.0, description="licit transfers within a bank")
    split_days: tuple[float, float] = Field(
        (0.6, 0.75), description="fractions of the days ending the training and validation spans"
    )
    seed: int = 0


def interbank(params: InterbankParams) -> NodeDataset:
    rng = np.random.default_rng(params.seed)
    n = params.num_accounts
    bank_share = 1.0 / np.sqrt(np.arange(1, params.num_banks + 1))  # a few large banks
    bank = rng.choice(params.num_banks, n, p=bank_share / bank_share.sum())
    bank[rng.permutation(n)[: params.num_banks]] = np.arange(params.num_banks)  # none empty
    activity = rng.pareto(1.5, n) + 1.0
    business = rng.random(n) < 0.2
    activity[business] *= 5.0
    src, dst, amount, day, hour = _licit(params, rng, bank, activity)
    motif = _motifs(params, rng)
    src = np.concatenate([src, motif[0]])
    dst = np.concatenate([dst, motif[1]])
    amount = np.concatenate([amount, motif[2]])
    day = np.concatenate([day, motif[3]])
    hour = np.concatenate([hour, motif[4]])
    illicit = np.concatenate(
        [np.zeros(params.num_transactions, bool), np.ones(motif[0].size, bool)]
    )
    order = np.lexsort((hour, day))
    src, dst, amount, day, hour, illicit = (
        a[order] for a in (src, dst, amount, day, hour, illicit)
    )

    log_amount = np.log1p(amount)
    attr = np.stack(
        [
            (log_amount - log_amount.mean()) / log_amount.std(),
            hour / 24.0,
            (bank[src] == bank[dst]).astype(float),
        ],
        1,
    )
    train_end, val_end = (int(f * params.days) for f in params.split_days)
    split = np.where(day < train_end, 0, np.where(day < val_end, 1, 2))
    involved = np.zeros(n, bool)
    involved[src[illicit]] = involved[dst[illicit]] = True
    degree = np.bincount(np.concatenate([src, dst]), minlength=n)
    x = np.stack(
        [
            business.astype(float),
            np.log1p(degree) / np.log1p(degree.max()),
            rng.random(n),  # account age
            *rng.standard_normal((5, n)),  # attributes that carry nothing
        ],
        1,
    )
    edge_index, _ = remove_self_loops(torch.as_tensor(np.stack([src, dst])))
    edge_index = to_undirected(coalesce(edge_index), num_nodes=n)
    data = Data(
        x=torch.as_tensor(x).float(),
        edge_index=edge_index,
        y=torch.as_tensor(involved.astype(np.int64)),
        group=torch.as_tensor(bank),
    )
    task = EdgeTask(
        index=torch.as_tensor(np.stack([src, dst])),
        attr=torch.as_tensor(attr).float(),
        y=torch.as_tensor(illicit.astype(np.int64)),
        split=torch.as_tensor(split),
    )
    return NodeDataset("interbank", data, 2, edge_task=task)


def _licit(params: InterbankParams, rng: np.random.Generator, bank, activity):
    """Transfers between accounts drawn by activity, mostly inside the sender's bank."""
    m, n = params.num_transactions, params.num_accounts
    weight = activity / activity.sum()
    src = rng.choice(n, m, p=weight)
    dst = rng.choice(n, m, p=weight)
    by_bank = [np.flatnonzero(bank == b) for b in range(params.num_banks)]
    inside = rng.random(m) < params.same_bank
    for b, members in enumerate(by_bank):
        pick = np.flatnonzero(inside & (bank[src] == b))
        w = activity[members] / activity[members].sum()
        dst[pick] = rng.choice(members, pick.size, p=w)
    clash = src == dst
    dst[clash] = (dst[clash] + 1) % n
    amount = np.round(rng.lognormal(6.0, 1.5, m), 2)
    day = rng.integers(0, params.days, m)
    hour = np.clip(rng.normal(13.0, 3.5, m), 0, 23.99)
    return src, dst, amount, day, hour


def _motifs(params: InterbankParams, rng: np.random.Generator):
    """The laundering transfers: each motif over fresh accounts of any banks, within two
    days, amounts that split a sum evenly (± 3 %) and lose a few percent per hop."""
    parts: list[tuple[np.ndarray, ...]] = []
    for _ in range(params.patterns):
        kind = MOTIFS[rng.integers(len(MOTIFS))]
        k = int(rng.integers(3, 8))
        who = rng.choice(params.num_accounts, k + 2, replace=False)
        total = rng.lognormal(9.5, 0.5)
        if kind == "fan-out":
            s, d, a = np.full(k, who[0]), who[1 : k + 1], np.full(k, total / k)
        elif kind == "fan-in":
            s, d, a = who[1 : k + 1], np.full(k, who[0]), np.full(k, total / k)
        elif kind == "cycle":
            ring = who[:k]
            s, d = ring, np.roll(ring, -1)
            a = total * 0.97 ** np.arange(k)
        else:  # scatter-gather: one source, k mules, one sink
            mules = who[2 : k + 2]
            s = np.concatenate([np.full(k, who[0]), mules])
            d = np.concatenate([mules, np.full(k, who[1])])
            a = np.concatenate([np.full(k, total / k), np.full(k, 0.97 * total / k)])
        a = a * rng.uniform(0.97, 1.03, a.size)
        start = rng.integers(0, params.days - 1)
        day = start + (np.arange(a.size) * 2 >= a.size).astype(int)
        parts.append((s, d, np.round(a, 2), day, rng.uniform(0, 24, a.size)))
    if not parts:
        return tuple(np.zeros(0, dtype) for dtype in (np.int64, np.int64, float, np.int64, float))
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))
