"""Metric-DP on released node embeddings (CE-FedGNN, Theorem 3.6).

The deployment publishes one embedding per node of the population graph (the released model's
hidden representation on the whole graph), L2-normalised and perturbed with N(0, σ0² I): any
two nodes whose normalised embeddings lie within distance ρ are (ε(ρ), δ)-indistinguishable,
with ε(ρ) from MetricGaussian(σ0, releases=1) in the ledger. The evaluator reports ρ as the
chosen percentile of k-th-nearest-neighbour distances among the clean normalised embeddings,
ε at that ρ, the utility of the release (a linear probe trained on the released embeddings of
the clients' training nodes, scored on their test nodes), and how often a nearest-neighbour
adversary holding the clean embeddings links a release back to its node.

Nothing else is released: a membership attack that needs posteriors is "not applicable"."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import NearestNeighbors
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.accountants import ADVERSARIES, MetricGaussian, Scope, rho_knn_percentile
from fgl_workbench.data.datasets import NodeDataset
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses import noise
from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.query import table_rows
from fgl_workbench.storable import storable
from fgl_workbench.transcript import EMBEDDINGS, PUBLIC, SERVER, Transcript


class MetricDPConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    sigma0: float = Field(0.5, gt=0.0, description="noise std on each unit-norm embedding")
    k: int = Field(50, ge=1, description="ρ is the distance to the k-th nearest neighbour")
    percentile: float = Field(90.0, ge=0.0, le=100.0, description="percentile of those distances")


def normalise(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit L2 norm; an all-zero row (a dead ReLU state) stays zero, which is
    still inside the unit ball the guarantee covers."""
    norms = x.norm(dim=1, keepdim=True)
    return x / torch.where(norms > 0, norms, torch.ones_like(norms))


@storable
class EmbeddingRelease:
    """The published table of noisy embeddings: the only thing a querier gets."""

    normalised = True  # rows are L2-normalised before their noise (public protocol)

    def __init__(self, table: torch.Tensor) -> None:
        self._table = table

    @property
    def num_nodes(self) -> int:
        return int(self._table.shape[0])

    def embeddings(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        """Rows of the published table (computed once on the whole graph, so ``hops`` does
        not change the answer; repeated queries return the same release, so they cost no
        further privacy)."""
        return table_rows(self._table, node_ids)

    def logits(self, node_ids: np.ndarray, hops: int = 0) -> torch.Tensor:
        raise NotApplicableError(
            "the target releases only metric-DP node embeddings, no posteriors"
        )

    def renamed(self, names: np.ndarray) -> EmbeddingRelease:
        """The same table with node i's row asked as ``names[i]``."""
        return EmbeddingRelease(self._table[torch.as_tensor(np.argsort(names))])


@dataclass(frozen=True)
class MetricReleases:
    """Every metric-DP release of node vectors, in release order, kept for the evaluator (no
    view carries it): node ``nodes[j]`` was released ``counts[j]`` times, its r-th release
    ``noisy[j, r]`` drawn from ``clean[j, r]`` (rows past its count are NaN)."""

    nodes: np.ndarray  # [n] global ids
    counts: np.ndarray  # [n]
    clean: np.ndarray  # [n, R, dim] float64
    noisy: np.ndarray  # [n, R, dim] float64

    @staticmethod
    def of(log: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> MetricReleases:
        """From (node ids, clean rows, noisy rows) batches in release order; rows of
        different widths (hidden and output states) are zero-padded to the widest."""
        width = max(c.shape[1] for _, c, _ in log)
        per_node: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        for ids, clean, noisy in log:
            pad = ((0, 0), (0, width - clean.shape[1]))
            clean, noisy = np.pad(clean, pad), np.pad(noisy, pad)
            for i, node in enumerate(ids.tolist()):
                per_node.setdefault(node, []).append((clean[i], noisy[i]))
        nodes = np.array(sorted(per_node), dtype=np.int64)
        counts = np.array([len(per_node[n]) for n in nodes], dtype=np.int64)
        shape = (nodes.size, int(counts.max(initial=0)), width)
        clean_all, noisy_all = np.full(shape, np.nan), np.full(shape, np.nan)
        for j, n in enumerate(nodes.tolist()):
            clean_all[j, : counts[j]] = [c for c, _ in per_node[n]]
            noisy_all[j, : counts[j]] = [y for _, y in per_node[n]]
        return MetricReleases(nodes, counts, clean_all, noisy_all)

    @cached_property
    def _filled(self) -> torch.Tensor:
        """The clean vectors with padding as zeros (the same on both sides of a pair)."""
        return torch.as_tensor(np.nan_to_num(self.clean))

    def distances(self, rows: np.ndarray) -> np.ndarray:
        """[len(rows), n]: for each pair the largest distance between their clean vectors at
        the same release index (what ε(ρ) at R releases needs: within ρ at every one), ∞
        between nodes released a different number of times (the count tells them apart)."""
        clean = self._filled
        out = torch.zeros(len(rows), self.nodes.size, dtype=torch.float64)
        for r in range(clean.shape[1]):
            out = torch.maximum(out, torch.cdist(clean[rows, r], clean[:, r]))
        differ = self.counts[rows][:, None] != self.counts[None, :]
        return np.where(differ, np.inf, out.numpy(force=True))

    def rho(self, k: int, percentile: float) -> float:
        """The ``percentile`` over released nodes of the distance to their k-th nearest other
        node (``distances``); nodes with fewer than k comparable nodes are left out."""
        kth = []
        for start in range(0, self.nodes.size, 1024):
            rows = np.arange(start, min(start + 1024, self.nodes.size))
            d = self.distances(rows)
            d[np.arange(rows.size), rows] = np.inf  # not its own neighbour
            kth.append(np.sort(d, axis=1)[:, max(1, min(k, d.shape[1] - 1)) - 1])
        found = np.concatenate(kth) if kth else np.array([])
        found = found[np.isfinite(found)]
        return float(np.percentile(found, percentile)) if found.size else float("nan")


@dataclass(frozen=True)
class ReleaseAudit:
    rho: float
    probe_accuracy: float
    linkage_rate: float  # releases whose nearest clean embedding is their own node's

    def as_utility(self) -> dict[str, float]:
        return {
            "metric_rho": self.rho,
            "release_probe_accuracy": self.probe_accuracy,
            "release_linkage_rate": self.linkage_rate,
        }


@torch.no_grad()
def release(
    model: nn.Module, graph: Data, cfg: MetricDPConfig, generator: torch.Generator
) -> tuple[EmbeddingRelease, torch.Tensor]:
    """(the published noisy table, the clean normalised embeddings kept for the evaluator)."""
    model.eval()
    clean, noisy = privatize(model.embed(graph.x, graph.edge_index).double(), cfg.sigma0, generator)
    return EmbeddingRelease(noisy.float()), clean


def privatize(
    rows: torch.Tensor, sigma0: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows normalised, their release): the whole mechanism, what its audit runs."""
    clean = normalise(rows)
    return clean, perturb(clean, sigma0, generator)


def perturb(clean: torch.Tensor, sigma0: float, generator: torch.Generator) -> torch.Tensor:
    """The mechanism: each (unit-norm) row plus N(0, σ0² I), in ``clean``'s dtype."""
    return clean + noise.gaussian(clean.shape, sigma0, generator, clean.dtype)


def audit(
    published: EmbeddingRelease,
    clean: torch.Tensor,
    labels: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    cfg: MetricDPConfig,
) -> ReleaseAudit:
    """Evaluator-side figures of one release (``labels``, ``train``, ``test`` are ground truth,
    never shown to an attack)."""
    k = min(cfg.k, clean.shape[0] - 1)
    rho = rho_knn_percentile(clean.numpy(force=True), k=k, q=cfg.percentile, normalize=False)
    noisy = published.embeddings(np.arange(published.num_nodes)).double().numpy(force=True)
    probe = LogisticRegression(max_iter=2000).fit(noisy[train], labels[train])
    accuracy = float((probe.predict(noisy[test]) == labels[test]).mean())
    nearest = (
        NearestNeighbors(n_neighbors=1).fit(clean.numpy(force=True)).kneighbors(noisy)[1][:, 0]
    )
    linkage = float((nearest == np.arange(noisy.shape[0])).mean())
    return ReleaseAudit(rho, accuracy, linkage)


def publish_embeddings(
    model: nn.Module,
    federation: Federation,
    cfg: MetricDPConfig,
    seed: int,
    transcript: Transcript,
) -> tuple[EmbeddingRelease, dict[str, float], MetricReleases]:
    """The metric-DP release of every node's embedding, recorded in the transcript, the
    evaluator's figures of it and what was released from what (for the evaluator's audit)."""
    ds = federation.dataset
    assert isinstance(ds, NodeDataset)
    published, clean = release(model, ds.data, cfg, seeded_generator(seed))
    # published with the last round's index: a new round would drop the kept payloads of
    # the last one (keep_payloads: last_round), which the server's view still needs
    last = max((m.round for m in transcript.messages), default=0)
    transcript.send(last, SERVER, PUBLIC, EMBEDDINGS, published.embeddings(np.arange(ds.num_items)))
    parts = federation.partition.clients
    train = np.concatenate([c.train for c in parts])
    test = np.concatenate([c.test for c in parts])
    labels = ds.data.y.numpy(force=True)
    figures = audit(published, clean, labels, train, test, cfg).as_utility()
    ids = np.arange(ds.num_items)
    noisy = published.embeddings(ids).double().numpy(force=True)
    return published, figures, MetricReleases.of([(ids, clean.numpy(force=True), noisy)])


METRIC_SCOPE = Scope(
    "node",
    "two nodes released equally often whose clean normalised vectors are within ρ at every "
    "release (ρ is measured on what was released)",
    ADVERSARIES,
)


def ledger_event(cfg: MetricDPConfig) -> MetricGaussian:
    return MetricGaussian(cfg.sigma0, 1, scope=METRIC_SCOPE)


class MetricDP:
    name = "metric-dp"
    stage = "release"
    Config = MetricDPConfig
    accounted = True  # its ε(ρ) is in the ledger, though over no neighbouring relation
    no_target_epsilon = (
        "its ε(ρ) depends on ρ, measured on the released embeddings after training, so no σ0 "
        "can be chosen for an ε before training; give sigma0"
    )

    def privacy_unit(self, config: MetricDPConfig) -> PrivacyUnit | None:
        return None  # ε(ρ) is metric-DP, not (ε, δ) over a neighbouring relation


DEFENSES.register("metric-dp")(MetricDP())
