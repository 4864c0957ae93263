"""Link stealing (He, Jia, Backes, Gong and Zhang, USENIX Security 2021): are two nodes
linked in a client's private graph, judged from the posteriors its deployment serves?

A GNN's posterior for a node mixes its neighbours', so linked nodes get closer posteriors.
Unsupervised: the pair's score is minus the distance between the two posteriors, in one of the
paper's eight distances. Supervised: a small MLP over all eight distances and both entropies,
trained on the pairs the adversary knows to be linked or not (its partial knowledge of the
graph). ``signal: features`` scores the same distances on raw node features, the
target-independent baseline: whatever the posteriors add over it is what the model leaks.
``signal: posterior+features`` is He et al.'s adversary that also knows the node attributes:
unsupervised, the pair's posterior and feature distances, each standardised over the pairs
asked about (so its scores, unlike a single distance's, depend on which pairs are asked,
He et al.'s uniform negatives included), are added; supervised, the MLP reads the distances
of both."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fgl_workbench.adversary.candidates import NodePairs
from fgl_workbench.adversary.threat import BackgroundKnowledge, InsiderView, QuerierView, ServedView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.query import AnswerTable, NodeQueryAPI

Distance = Literal[
    "cosine",
    "euclidean",
    "correlation",
    "chebyshev",
    "braycurtis",
    "canberra",
    "cityblock",
    "sqeuclidean",
]
DISTANCES: tuple[str, ...] = Distance.__args__  # type: ignore[attr-defined]


class LinkStealingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Literal["unsupervised", "supervised"] = "unsupervised"
    distance: Distance = "correlation"
    signal: Literal["posterior", "embedding", "features", "posterior+features"] = "posterior"
    source: Literal["served", "release", "exchanged"] = Field(
        "served",
        description="served: each client's deployment on its private subgraph; release: what "
        "an external querier gets (e.g. GAP's table of logits on the population graph); "
        "exchanged: the embeddings clients exchanged through the server (CE-FedGNN), as the "
        "server saw them (signal: embedding)",
    )
    hops: int = Field(2, ge=0, le=4, description="neighbourhood of a release query")

    @model_validator(mode="after")
    def _exchanged_are_embeddings(self) -> LinkStealingConfig:
        if self.source == "exchanged" and self.signal.startswith("posterior"):
            raise ValueError("signal: source 'exchanged' carries embeddings, not posteriors")
        return self


def pair_distance(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Row-wise distance between ``a[i]`` and ``b[i]`` (scipy's definitions, vectorised)."""
    diff = np.abs(a - b)
    if metric == "cityblock":
        return diff.sum(1)
    if metric == "euclidean":
        return np.sqrt((diff**2).sum(1))
    if metric == "sqeuclidean":
        return (diff**2).sum(1)
    if metric == "chebyshev":
        return diff.max(1)
    if metric == "braycurtis":
        return diff.sum(1) / np.maximum(np.abs(a + b).sum(1), 1e-12)
    if metric == "canberra":
        denom = np.abs(a) + np.abs(b)
        return np.where(denom > 0, diff / np.where(denom > 0, denom, 1), 0.0).sum(1)
    if metric == "cosine":
        norm = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
        return 1.0 - (a * b).sum(1) / np.maximum(norm, 1e-12)
    if metric == "correlation":
        return pair_distance(a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True), "cosine")
    raise ValueError(f"distance: expected one of {', '.join(DISTANCES)} (got {metric!r})")


def pair_features(
    signal: np.ndarray, src: np.ndarray, dst: np.ndarray, entropies: bool = True
) -> np.ndarray:
    """All eight distances of each pair and, for posteriors, the two entropies (smaller
    first)."""
    a, b = signal[src], signal[dst]
    columns = [pair_distance(a, b, m) for m in DISTANCES]
    if entropies:
        entropy = -(signal * np.log(np.clip(signal, 1e-12, None))).sum(1)
        ea, eb = entropy[src], entropy[dst]
        columns += [np.minimum(ea, eb), np.maximum(ea, eb)]
    return np.stack(columns, 1)


def node_signal(
    api: Any,
    nodes: np.ndarray,
    knowledge: BackgroundKnowledge,
    config: LinkStealingConfig,
    signal: str,
) -> np.ndarray:
    """One row per population node, filled for ``nodes``: what the pairs are judged on."""
    if signal == "features":
        return knowledge.graph.x.numpy(force=True).astype(float)
    hops = (config.hops,) if isinstance(api, NodeQueryAPI | AnswerTable) else ()
    if signal == "posterior":
        rows = torch.softmax(api.logits(nodes, *hops).float(), dim=1).numpy(force=True)
    elif hasattr(api, "embeddings"):
        rows = api.embeddings(nodes, *hops).float().numpy(force=True)
    else:
        raise NotApplicableError("link stealing: the target gives out no node embeddings")
    table = np.zeros((knowledge.graph.num_nodes, rows.shape[1]))
    table[nodes] = rows
    return table


def _standardised(values: np.ndarray) -> np.ndarray:
    return (values - values.mean()) / max(float(values.std()), 1e-12)


class LinkStealing:
    name = "link-stealing"
    family = "link"
    threat = ThreatModel(
        sees="the clients' served posteriors by node id",
        knows="the population's node features, a known share of edges and non-edges",
    )
    Config = LinkStealingConfig

    def run(self, inp: AttackInput, config: LinkStealingConfig, seed: int) -> AttackOutput:
        pairs, knowledge, view = inp.candidates, inp.knowledge, inp.view
        if not isinstance(pairs, NodePairs) or not isinstance(
            view, ServedView | QuerierView | InsiderView
        ):
            raise NotApplicableError("link stealing needs node pairs and answers about nodes")
        known = known_pairs(knowledge)
        nodes = np.unique(np.concatenate([pairs.src, pairs.dst, *known[0]]))
        signals = [
            (name, node_signal(view.api, nodes, knowledge, config, name))
            for name in config.signal.split("+")
        ]
        if config.mode == "unsupervised":
            distances = [
                pair_distance(table[pairs.src], table[pairs.dst], config.distance)
                for _, table in signals
            ]
            if len(distances) == 1:
                return AttackOutput(-distances[0])
            return AttackOutput(-sum(_standardised(d) for d in distances))
        (src, dst), truth = known
        if truth.all() or not truth.any():
            raise NotApplicableError("supervised link stealing needs known edges and non-edges")
        clf = make_pipeline(
            StandardScaler(),
            MLPClassifier((32,), alpha=1e-3, max_iter=3000, random_state=seed % 2**32),
        )

        def features(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return np.hstack(
                [pair_features(table, a, b, name == "posterior") for name, table in signals]
            )

        clf.fit(features(src, dst), truth)
        scores = clf.predict_proba(features(pairs.src, pairs.dst))[:, 1]
        return AttackOutput(scores, details={"trained_on": int(truth.size)})


def known_pairs(
    knowledge: BackgroundKnowledge,
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """The adversary's known edges (one direction each) and known non-edges, with labels."""
    ei = knowledge.graph.edge_index.numpy(force=True)
    edges = ei[:, ei[0] < ei[1]]
    non = knowledge.known_non_edges if knowledge.known_non_edges is not None else np.zeros((2, 0))
    src = np.concatenate([edges[0], non[0]]).astype(np.int64)
    dst = np.concatenate([edges[1], non[1]]).astype(np.int64)
    truth = np.concatenate([np.ones(edges.shape[1], bool), np.zeros(non.shape[1], bool)])
    return (src, dst), truth


ATTACKS.register("link-stealing")(LinkStealing())
