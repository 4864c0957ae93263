"""Structure inversion at the server: which pairs of client k's nodes are linked, recovered
from what k uploaded, the server knowing k's node features and labels but not its edges.

The unknown is a relaxed adjacency A ∈ [0, 1]^{pairs} (symmetric, no self-loops) over k's
nodes, run through the target's architecture densely (GCN: D^-½(A + I)D^-½; GIN: sums over
A); projected gradient steps (``lr`` times the gradient of the objective summed over pairs)
keep it in the box; plain steps, as GraphMI's, since a per-pair step size such as Adam's
would erase the terms' relative pulls on each pair.
Each pair's score is its final A_ij.

- ``objective: model`` is GraphMI (Zhang, Zhang, Chen, Wang and Wang, IJCAI 2021): k's
  uploaded model should fit k's labels on (X, A), so A minimises the labelled nodes'
  cross-entropy plus ``smoothness`` · tr(X̃ᵀLX̃) (linked nodes have alike features; X̃: unit
  rows) plus ``sparsity`` · ‖A‖₁ (both per pair). Node level, GCN.
- ``objective: update`` matches k's update (uploaded − sent global model): k's local
  training is replayed from the global model on (X, A, labels) (``gradient_inversion.Replay``)
  and A moved until the replayed update points the way the observed one does (the cosine of
  Geiping et al.), the smoothness and sparsity terms added as above. At graph level this is
  gradient matching over the adjacency of k's training graphs, the setting of GRAIN (Drencheva
  et al., ICLR 2025), which needs an update that is one full-batch step (FedSGD: the target's
  ``local_epochs: 1``, ``optimizer: sgd`` and a ``batch_size`` no smaller than k's graphs);
  a longer local round is replayed as one step per epoch, a mismatch the details record.
- ``method: grain`` replaces the descent by GRAIN's search (``grain.py``): at graph level,
  against the GIN under FedSGD, candidate neighbourhoods are checked against the span of
  each layer's weight gradient, assembled depth first into whole graphs and ranked by the
  same update mismatch; a pair's score is 1 on the chosen graph's edges, else 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from scipy.linalg import block_diag
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.adversary.candidates import NodePairs
from fgl_workbench.adversary.threat import BackgroundKnowledge, ClientNodes, ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.reconstruction.gradient_inversion import Replay, observed_round
from fgl_workbench.attacks.reconstruction.grain import (
    GinLayers,
    SpanCheck,
    assemble,
    best_combination,
    feature_types,
    gradient_spans,
    one_hop_blocks,
    wl_key,
)
from fgl_workbench.attacks.reconstruction.structure import DECISION, upper_pairs
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.models.graph import GIN
from fgl_workbench.models.node import NodeGNN, SparseGCNConv


class StructureInversionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    client: int = Field(0, ge=0, description="whose structure the server recovers")
    objective: Literal["model", "update", "features"] = Field(
        "model",
        description="model: GraphMI on the client's uploaded weights (node level); update: "
        "match the client's update by replaying its local training (node or graph level); "
        "features: the smoothness prior alone, no upload read (the yardstick of what the "
        "known features give away by themselves)",
    )
    round: Literal["first", "last"] = Field(
        "last", description="which kept round's upload (the target's keep_payloads decides)"
    )
    steps: int = Field(300, ge=1, le=100_000, description="projected steps on A")
    optimiser: Literal["pgd", "adam"] = Field(
        "pgd",
        description="pgd: plain projected gradient steps (GraphMI's); adam: projected Adam "
        "steps, a step size per pair (for pure matching, smoothness and sparsity 0)",
    )
    lr: float = Field(
        0.01, gt=0.0, le=100.0, description="step size (pgd: times the gradient summed over pairs)"
    )
    restarts: int = Field(
        1, ge=1, le=100, description="descents from random starts; the lowest loss is kept"
    )
    smoothness: float = Field(0.1, ge=0.0, description="weight of the feature smoothness term")
    sparsity: float = Field(0.0, ge=0.0, description="weight of the mean of A")
    method: Literal["descent", "grain"] = Field(
        "descent",
        description="descent: projected steps on the relaxed A; grain: GRAIN's search (ICLR "
        "2025; graph level, GIN, FedSGD, objective update): blocks checked against the "
        "gradient's span, assembled depth first, ranked by the update's mismatch",
    )
    grain_tolerance: list[float] = Field(
        [1e-3, 3e-2],
        min_length=1,
        description="grain: per GIN layer d (from 1), the largest relative distance of a "
        "node's input rows from that layer's gradient span; its length is how many layers "
        "are checked",
    )
    grain_rank_tol: float = Field(
        1e-5, gt=0.0, lt=1.0, description="grain: singular values kept, relative to the largest"
    )
    grain_max_degree: int = Field(4, ge=1, le=8, description="grain: a block's most neighbours")
    grain_states: int = Field(
        20_000, ge=1, description="grain: search states per graph before it gives up"
    )
    grain_graphs: int = Field(
        64,
        ge=1,
        description="grain, a client with several graphs: complete graphs per graph kept for "
        "the final ranking (with one graph each is ranked as found)",
    )
    grain_accept: float = Field(
        1e-8,
        ge=0.0,
        description="grain: an update mismatch (1 − cosine) at or under which a complete graph "
        "ends the search (the true graph's is float rounding, about 1e-12)",
    )
    decoder: Literal["relaxed", "embedding"] = Field(
        "relaxed",
        description="relaxed: a pair's score is its A_ij; embedding: GraphMI's auto-encoder "
        "step, the inner product of the pair's hidden representations (node level, the model "
        "read on the recovered A), which mixes in the features' own similarity",
    )
    adversary: Literal["server"] = "server"


class Dense(nn.Module):
    """The target's model read on a dense adjacency, with the model's own modules (so its
    parameters keep their names, under ``inner.``): GCN's layers propagate with
    D^-½(A + I)D^-½, GIN's sum A·h and mean-pool with a [graphs, nodes] matrix."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        gcn = isinstance(model, NodeGNN) and isinstance(model.convs[0], SparseGCNConv)
        if not gcn and not isinstance(model, GIN):
            raise NotApplicableError(
                "structure-inversion: model.arch must be gcn (node level) or gin (graph level)"
            )
        self.inner = model

    def forward(self, x: torch.Tensor, graph: tuple[torch.Tensor, torch.Tensor | None]):
        adjacency, pool = graph
        m = self.inner
        if isinstance(m, GIN):
            h = m.project(x)
            for conv in m.convs:
                h = F.relu(conv.nn((1 + conv.eps) * h + adjacency @ h))
            assert pool is not None
            return m.head(pool @ h)
        return self.layers(x, adjacency, len(m.convs))

    def layers(self, x: torch.Tensor, adjacency: torch.Tensor, count: int) -> torch.Tensor:
        """The first ``count`` GCN layers (the last before its ReLU)."""
        a = adjacency + torch.eye(adjacency.shape[0], dtype=adjacency.dtype)
        d = a.sum(1).rsqrt()
        norm = d[:, None] * a * d[None, :]
        h = x
        for i, conv in enumerate(self.inner.convs[:count]):
            h = norm @ conv.lin(F.relu(h) if i else h) + conv.bias
        return h


def client_graph(knowledge_nodes: ClientNodes | tuple[Data, ...]) -> tuple:
    """(features, pairs i < j that may be edges, pooling matrix or None, labelled rows,
    labels) of the client as the server knows it; at graph level k's graphs laid end to end
    (pairs only inside a graph), one logits row per graph."""
    if isinstance(knowledge_nodes, ClientNodes):
        x = knowledge_nodes.x.double()
        i, j = upper_pairs(x.shape[0])
        return x, (i, j), None, knowledge_nodes.labelled, knowledge_nodes.labels
    graphs = knowledge_nodes
    sizes = [g.num_nodes for g in graphs]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    blocks = [upper_pairs(n) for n in sizes]
    i = np.concatenate([b[0] + s for b, s in zip(blocks, starts, strict=True)])
    j = np.concatenate([b[1] + s for b, s in zip(blocks, starts, strict=True)])
    pool = torch.zeros(len(graphs), int(sum(sizes)), dtype=torch.float64)
    for g, (s, n) in enumerate(zip(starts.tolist(), sizes, strict=True)):
        pool[g, s : s + n] = 1.0 / n
    x = torch.cat([g.x for g in graphs]).double()
    labels = torch.cat([g.y.view(-1) for g in graphs]).numpy(force=True)
    return x, (i, j), pool, np.arange(len(graphs)), labels


def candidate_positions(
    src: np.ndarray, dst: np.ndarray, i: np.ndarray, j: np.ndarray, n: int
) -> np.ndarray:
    """Each candidate pair's (rows ``src``, ``dst``) index among the pairs (i, j)."""
    keys = np.minimum(src, dst) * n + np.maximum(src, dst)
    known = i * n + j  # ascending: row-major upper pairs, blocks in order
    at = np.searchsorted(known, keys)
    fits = (src >= 0) & (dst >= 0) & (src < n) & (dst < n) & (at < known.size)
    if not fits.all() or not np.array_equal(known[at], keys):
        raise NotApplicableError(
            "structure-inversion: a pair asked about is not two of the client's nodes (graph "
            "level: of one graph)"
        )
    return at


class StructureInversion:
    name = "structure-inversion"
    family = "link"
    threat = ThreatModel(
        sees="a client's uploaded weights and the global model it was sent",
        knows=(
            "the client's nodes in an order the challenge draws, their features and its "
            "labels (graph level: its training graphs' features and labels), none of its "
            "edges; the architecture and recipe"
        ),
    )
    Config = StructureInversionConfig

    def run(self, inp: AttackInput, config: StructureInversionConfig, seed: int) -> AttackOutput:
        view, knowledge, pairs = inp.view, inp.knowledge, inp.candidates
        if not isinstance(view, ServerView) or not isinstance(pairs, NodePairs):
            raise NotApplicableError("structure-inversion: needs the server's view and node pairs")
        if knowledge.client_nodes is None:
            raise NotApplicableError("structure-inversion: the client's nodes are not known")
        if config.objective == "model" and view.level != "node":
            raise NotApplicableError(
                "structure-inversion: objective 'model' (GraphMI) is node level; use 'update'"
            )
        sent, upload = observed_round(view, config.client, config.round)
        x, (i, j), pool, labelled, labels = client_graph(knowledge.client_nodes)
        n = x.shape[0]
        model = Dense(view.spec.build())
        names = [name for name, _ in model.named_parameters()]
        if any(name.split(".", 1)[1] not in upload for name in names):
            raise NotApplicableError(
                "structure-inversion: the upload leaves out modules the client keeps to itself"
            )
        train = torch.zeros(len(labels) if pool is not None else n, dtype=torch.bool)
        train[torch.as_tensor(labelled)] = True
        soft = F.one_hot(torch.as_tensor(labels, dtype=torch.long), view.num_classes).double()
        smooth_cost = pair_distances(x, i, j)
        recipe = knowledge.recipe.config
        loss_of = self._objective(config, model, sent, upload, recipe, x, pool, train, soft)
        src, dst = pairs.src, pairs.dst  # rows of the nodes as the knowledge lists them
        at = candidate_positions(src, dst, i, j, n)
        if config.method == "grain":
            a, loss, counts = self._grain(config, view, knowledge, sent, upload, loss_of)
            return AttackOutput(
                a[i, j][at],
                threshold=DECISION,
                details={"final_loss": loss, "final_fit": loss, "counts": counts},
            )
        rows, cols = torch.as_tensor(i), torch.as_tensor(j)

        def objective(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """(the whole loss, its data term) at the relaxed pairs ``a``."""
            adjacency = torch.zeros(n, n, dtype=torch.float64).index_put((rows, cols), a)
            fit = loss_of(adjacency + adjacency.T)
            prior = config.smoothness * (a * smooth_cost).mean() + config.sparsity * a.mean()
            return fit + prior, fit

        gen = seeded_generator(seed)
        best: tuple[float, torch.Tensor, float] | None = None
        for r in range(config.restarts):  # the first from the middle, the others anywhere
            start = torch.rand(i.size, generator=gen, dtype=torch.float64)
            if r == 0:
                start = 0.5 + 0.02 * (start - 0.5)
            a, loss, fit = descend(start, objective, config)
            if best is None or loss < best[0]:
                best = (loss, a, fit)
        assert best is not None
        loss, a, fit = best
        scores = a.detach().numpy(force=True)[at]
        if config.decoder == "embedding":
            if pool is not None:
                raise NotApplicableError("structure-inversion: decoder 'embedding' is node level")
            with torch.no_grad():
                adjacency = torch.zeros(n, n, dtype=torch.float64).index_put((rows, cols), a)
                h = F.relu(model.layers(x, adjacency + adjacency.T, 1)).numpy(force=True)
            scores = (h[src] * h[dst]).sum(1)
        return AttackOutput(
            scores,
            threshold=DECISION,
            details={"final_loss": loss, "final_fit": fit},
        )

    @staticmethod
    def _grain(
        config: StructureInversionConfig,
        view: ServerView,
        knowledge: BackgroundKnowledge,
        sent: dict,
        upload: dict,
        loss_of: Callable[[torch.Tensor], torch.Tensor],
    ) -> tuple[np.ndarray, float, dict[str, float]]:
        """GRAIN's search (``grain``) over each of k's graphs: (the dense adjacency of the
        chosen graphs laid end to end, its mismatch, the search's counts)."""
        graphs = knowledge.client_nodes
        recipe = knowledge.recipe.config
        if config.objective != "update" or not isinstance(graphs, tuple):
            raise NotApplicableError(
                "structure-inversion: method 'grain' is graph level and reads the update "
                "(objective: update)"
            )
        if int(recipe.get("batch_size", 0)) < len(graphs):
            raise NotApplicableError(
                "structure-inversion: method 'grain' needs the client's graphs in one batch "
                f"(the recipe's batch_size must be at least {len(graphs)})"
            )
        gin = view.spec.build()
        gin.load_state_dict(sent, strict=False)
        if len(config.grain_tolerance) > len(gin.convs):
            raise NotApplicableError(
                f"structure-inversion: grain_tolerance names {len(config.grain_tolerance)} "
                f"layers; the GIN has {len(gin.convs)}"
            )
        layers = GinLayers(gin)
        names = [w for d in range(len(config.grain_tolerance)) for w in layers.names(d + 1)]
        spans = gradient_spans(sent, upload, recipe, names, config.grain_rank_tol)
        check = SpanCheck(layers, spans, tuple(config.grain_tolerance))

        def mismatch(chosen: list[np.ndarray]) -> float:
            dense = torch.as_tensor(block_diag(*chosen), dtype=torch.float64)
            return float(loss_of(dense).detach())

        candidates, searches = [], []
        for g in graphs:
            x = g.x.double().numpy(force=True)
            kinds, types = feature_types(x)
            available = np.bincount(types, minlength=len(kinds))
            blocks = one_hop_blocks(check, kinds, available, config.grain_max_degree)
            kept: list[np.ndarray] = []
            found = StructureInversion._keeper(
                config, kept, mismatch if len(graphs) == 1 else None, types, len(gin.convs)
            )
            searches.append(assemble(x, types, blocks, check, config.grain_states, found))
            # nothing consistent: this graph is guessed edgeless
            candidates.append(kept or [np.zeros((g.num_nodes, g.num_nodes), dtype=bool)])
        chosen, loss = best_combination(candidates, mismatch)
        counts = {
            "grain_states": float(sum(a.states for a in searches)),
            "grain_complete": float(sum(a.complete for a in searches)),
            "grain_graphs_assembled": float(sum(a.complete > 0 for a in searches)),
            "grain_stopped": float(sum(a.stopped for a in searches)),
            "grain_cut_short": float(sum(a.cut_short for a in searches)),
        }
        return block_diag(*chosen).astype(float), loss, counts

    @staticmethod
    def _keeper(
        config: StructureInversionConfig,
        kept: list[np.ndarray],
        mismatch: Callable[[list[np.ndarray]], float] | None,
        types: np.ndarray,
        layers: int,
    ) -> Callable[[np.ndarray], bool]:
        """What the search does with a complete graph. With the client's one graph
        (``mismatch`` given), the update's mismatch ranks it at once: the best so far is kept
        and a mismatch under ``grain_accept`` ends the search. With several, the batch's
        mismatch needs the others, so the first ``grain_graphs`` are kept for
        ``best_combination``. A graph the GIN cannot tell from one already seen
        (``wl_key``) is passed over."""
        best, seen = [np.inf], set()

        def found(adjacency: np.ndarray) -> bool:
            key = wl_key(adjacency, types, layers)
            if key in seen:
                return False
            seen.add(key)
            if mismatch is None:
                kept.append(adjacency)
                return len(kept) >= config.grain_graphs
            loss = mismatch([adjacency])
            if loss < best[0]:
                best[0] = loss
                kept[:] = [adjacency]
            return loss <= config.grain_accept

        return found

    @staticmethod
    def _objective(
        config: StructureInversionConfig,
        model: Dense,
        sent: dict,
        upload: dict,
        recipe: dict,
        x: torch.Tensor,
        pool: torch.Tensor | None,
        train: torch.Tensor,
        soft: torch.Tensor,
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The data term as a function of the dense adjacency."""
        if config.objective == "features":
            return lambda adj: adj.sum() * 0.0
        if config.objective == "model":
            model.load_state_dict({f"inner.{k}": v for k, v in upload.items()}, strict=False)
            model.double().eval()
            labels = soft.argmax(1)
            return lambda adj: F.cross_entropy(model(x, (adj, pool))[train], labels)
        replay = Replay(model, {f"inner.{k}": v for k, v in sent.items()}, recipe)
        # weight decay moves every client's model the same known way (as gradient-inversion)
        decay = replay.update().detach()
        inner = [name.split(".", 1)[1] for name in replay.names]
        target = torch.cat([(upload[n].double() - sent[n].double()).reshape(-1) for n in inner])
        target = target - decay

        def mismatch(adj: torch.Tensor) -> torch.Tensor:
            replayed = replay.update(x, (adj, pool), train, soft) - decay
            return 1 - F.cosine_similarity(replayed, target, dim=0)

        return mismatch


def descend(
    start: torch.Tensor,
    objective: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    config: StructureInversionConfig,
) -> tuple[torch.Tensor, float, float]:
    """``config.steps`` projected steps from ``start``: (the pairs, the loss, its data term)."""
    a = start.clone().requires_grad_(True)
    adam = torch.optim.Adam([a], lr=config.lr) if config.optimiser == "adam" else None
    for _ in range(config.steps):
        loss, fit = objective(a)
        (grad,) = torch.autograd.grad(loss, [a])
        with torch.no_grad():
            if adam is None:
                a.sub_(config.lr * a.numel() * grad)
            else:
                a.grad = grad
                adam.step()
            a.clamp_(0.0, 1.0)
    loss, fit = objective(a)  # with autograd on: an update's replay differentiates itself
    return a.detach(), float(loss.detach()), float(fit.detach())


def pair_distances(x: torch.Tensor, i: np.ndarray, j: np.ndarray) -> torch.Tensor:
    """‖x̃_i − x̃_j‖² of unit-length feature rows, per pair: the smoothness term's cost."""
    unit = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    gram = unit @ unit.T
    return (2 - 2 * gram[torch.as_tensor(i), torch.as_tensor(j)]).clamp_min(0.0)


ATTACKS.register("structure-inversion")(StructureInversion())
