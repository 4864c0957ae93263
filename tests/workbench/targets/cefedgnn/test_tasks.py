"""CE-FedGNN on an edge task (the paper's AML setting, on the synthetic interbank data): an
edge between two clients is in both clients' sets at half weight, a remote endpoint's
embedding carries no gradient, and the federation learns what banks alone cannot."""

import numpy as np
import pytest
import torch

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.interbank import InterbankParams, interbank
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.cefedgnn.halo import halo_client
from fgl_workbench.targets.cefedgnn.propagation import Estimators
from fgl_workbench.targets.cefedgnn.tasks import (
    EdgeHead,
    EdgeModel,
    Halo,
    client_edges,
    edge_logits,
)
from fgl_workbench.transcript import EMBEDDINGS, SERVER

PARAMS = InterbankParams(num_banks=4, num_accounts=600, num_transactions=4000, patterns=60)
FAST = {"rounds": 12, "local_steps": 8, "batch_size": 128, "lr": 0.1, "model": {"hidden": 16}}


@pytest.fixture(scope="module")
def federation():
    ds = interbank(PARAMS)
    return build_federation(ds, make_partition(ds, "given", 4, 0, aux_fraction=0.1))


def test_cross_client_edges_are_in_both_clients_at_half_weight(federation):
    ds = federation.dataset
    owner = federation.partition.owner(ds.num_items)
    held = owner >= 0
    copies: dict[tuple[int, int], list[float]] = {}
    for part in federation.partition.clients:
        c = halo_client(ds, part, held)
        edges = client_edges(ds.edge_task, c, ds.num_items)
        u_v_w = zip(
            c.data.global_id[edges.src].tolist(),
            c.data.global_id[edges.dst].tolist(),
            edges.weight.tolist(),
            strict=True,
        )
        for u, v, w in u_v_w:
            copies.setdefault((u, v), []).append(w)
    src, dst = ds.edge_task.index.numpy()
    for u, v in zip(src.tolist(), dst.tolist(), strict=True):
        if not (held[u] and held[v]):
            assert (u, v) not in copies  # the auxiliary pool is outside the federation
        elif owner[u] == owner[v]:
            assert set(copies[(u, v)]) == {1.0}
        else:
            assert copies[(u, v)].count(0.5) == len(copies[(u, v)]) >= 2


def test_a_remote_endpoint_carries_no_gradient(federation):
    ds = federation.dataset
    c = halo_client(
        ds, federation.partition.clients[0], federation.partition.owner(ds.num_items) >= 0
    )
    edges = client_edges(ds.edge_task, c, ds.num_items)
    cross = torch.nonzero((edges.src >= c.num_own) | (edges.dst >= c.num_own)).squeeze(1)[:20]
    gnn = ModelSpec(ModelConfig(arch="sage", hidden=8), ds.num_features, 8, "node").build()
    model = EdgeModel(gnn, EdgeHead(8, 3, 2))
    n_halo = c.num_nodes - c.num_own
    halo = Halo(torch.rand(n_halo, 8), torch.rand(n_halo, 8, requires_grad=True), c.degree.clone())
    src, dst = edges.src[cross], edges.dst[cross]
    ends = torch.cat([src, dst])
    seeds = torch.unique(ends[ends < c.num_own])
    est = Estimators.zeros(c.num_own, 8, 8)
    logits = edge_logits(model, c, est, halo, src, dst, edges.attr[cross], seeds, 0.5, None)
    logits.sum().backward()
    assert halo.output.grad is None
    assert gnn.convs[0].lin_l.weight.grad.abs().sum() > 0


def test_the_federation_learns_the_cross_bank_motifs(federation):
    ce = TARGETS.get("ce-fedgnn")
    full = ce.fit(federation, FAST, [], seed=0)
    dropped = ce.fit(federation, {**FAST, "cross_edges": False}, [], seed=0)
    rate = float(federation.dataset.edge_task.y.float().mean())
    everything = 2 * rate / (1 + rate)  # F1 of calling every transfer illicit
    assert full.utility["f1_illicit"] > max(2 * everything, dropped.utility["f1_illicit"] + 0.1)
    assert set(full.heads) == {"edge"}
    with pytest.raises(NotApplicableError, match="no node posteriors"):
        full.query.logits(np.arange(3))
    assert full.query.embeddings(np.arange(3)).shape == (3, 16)
    alone = ce.fit(federation, {**FAST, "rounds": 2, "federated": False}, [], seed=0)
    for m in alone.client_models.values():  # stand-alone banks' GNNs, as the spec builds them
        alone.spec.build().load_state_dict(m.state_dict())


def test_both_vectors_are_released_and_accounted(federation):
    noisy = TARGETS.get("ce-fedgnn").fit(
        federation, {**FAST, "rounds": 3}, [applied("metric-dp", {"sigma0": 0.5, "k": 10})], 0
    )
    ups = [m for m in noisy.transcript.messages if m.kind == EMBEDDINGS and m.receiver == SERVER]
    assert all({"h", "h_out", "degree", "global_id"} <= set(m.payload) for m in ups)
    assert noisy.utility["max_releases"] == 2 * 3  # two vectors a round, three rounds
    assert noisy.ledger.metric().events[0].releases == 6
