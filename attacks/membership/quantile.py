"""Quantile-regression membership inference (Bertran et al., NeurIPS 2023, "Scalable
Membership Inference Attacks via Quantile Regression").

No reference or shadow models: the adversary queries the target on its auxiliary pool (known
non-members) and fits ONE small model q(x) of the distribution of the target's score on
non-members, conditioned on the record. A record is flagged when its score is above what a
non-member like it would get: the per-record threshold a reference attack buys with many
trained models, here learnt by regression on the pool.

- ``loss: gaussian`` (default): the model predicts a mean μ(x) and a standard deviation
  σ(x), trained by the Gaussian negative log-likelihood; the score is (s(x) − μ(x))/σ(x), so
  one model ranks for every FPR, and the threshold it implies for ``fpr`` is Φ⁻¹(1 − fpr).
- ``loss: pinball``: the model predicts the (1 − fpr) quantile itself (pinball loss); the
  score is s(x) − q(x), the threshold it implies 0. The paper's formulation for one FPR.

The score s is a signal of ``mia-threshold`` (default the true-label logit margin
log p_y − log(1 − p_y), LiRA's φ). The model is one of the workbench's backbones with one
output (μ and σ, or q) per class, read at the record's own label: node level an MLP on the
node's features (0 hops) or a GCN with max(2, ``hops``) layers on the population graph,
graph level a GIN. It trains on a ``1 − holdout`` share of the pool; the held-out share is
split in two, one half to stop training early and the other to set the threshold, so that
the threshold is read on records that chose neither the weights nor the stopping epoch
(exchangeable with a fresh non-member: the conformal guarantee is exact). The server fits one
model per client upload and keeps the maximum score.

The decision threshold (``threshold: holdout``, default) is the split-conformal (1 − fpr)
quantile of the calibration half's scores (the maximum over uploads, for the server): a few
hundred records overfit the model enough that the threshold it implies let through 12.7 %
of non-members at fpr 5 % (20 % at a pinball level of 10 %) in the planted test, against
7.6 % (9.2 %) held out; with the threshold on its own half of the holdout, 5.9 % (10.8 %)
on average over 10 seeds with no planted signal (``test_quantile.py``). ``threshold: model``
keeps the implied one, at fpr / (number of uploads) per upload for the server (a union
bound). Against one model the ranking, so AUC
and TPR at any FPR, is the same either way."""

from __future__ import annotations

from collections.abc import Callable
from statistics import NormalDist
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn
from torch_geometric.data import Batch

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.attacks.adaptive import adaptive_input
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.generators import best_fit, received_generators
from fgl_workbench.attacks.membership.observe import (
    QueryConfig,
    observed_apis,
    per_model_output,
    query,
)
from fgl_workbench.attacks.membership.reference import union
from fgl_workbench.attacks.membership.threshold import signal_scores
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.models import ModelConfig, build_model
from fgl_workbench.seeding import derive_seed
from fgl_workbench.targets.cefgc.generator import GeneratorConfig

PATIENCE = 50  # epochs without a better held-out loss before training stops
MIN_STD = 1e-3  # floor of the predicted σ, in standardised score units
MIN_EXCEEDING = 5  # pinball: training records expected above the quantile, at least
GRAPH_BATCH = 256

Forward = Callable[[nn.Module], torch.Tensor]  # the model's outputs on the records, in order


class QuantileConfig(QueryConfig):
    adversary: Literal["querier", "server", "client"] = Field(
        "querier",
        description="querier: black box on the released model; server: each client's "
        "uploaded model; client: a curious client of CeFGC, on the generators it received "
        "(their denoising loss on a graph as the signal)",
    )
    client: int = Field(0, ge=0, description="the curious client (adversary: client)")
    draws: int = Field(
        8, ge=1, le=1000, description="adversary client: noise draws per level and graph"
    )
    signal: Literal["loss", "confidence", "entropy", "modified_entropy"] = Field(
        "loss", description="the target's per-record score (loss: the true-label logit margin)"
    )
    loss: Literal["gaussian", "pinball"] = Field(
        "gaussian",
        description="gaussian: μ(x), σ(x) by likelihood, one model for every FPR; pinball: "
        "the (1 − fpr) quantile q(x)",
    )
    fpr: float = Field(
        0.05,
        gt=0.0,
        lt=0.5,
        description="target false-positive rate: the decision threshold, and the pinball "
        "level (5 %: at 1 % a pool of a few hundred records leaves a handful above the quantile)",
    )
    arch: Literal["auto", "mlp", "gcn", "sage", "gin"] = Field(
        "auto", description="the quantile model: auto = mlp at 0 hops, else gcn; gin for graphs"
    )
    hidden: int = Field(64, ge=1, le=1024, description="the quantile model's hidden units")
    epochs: int = Field(500, ge=1, le=10000, description="at most; stops early on the holdout")
    lr: float = Field(0.01, gt=0.0, le=1.0, description="the quantile model's Adam step")
    weight_decay: float = Field(5e-4, ge=0.0, le=1.0, description="its L2 penalty")
    holdout: float = Field(
        0.2,
        gt=0.0,
        lt=1.0,
        description="share of the auxiliary pool kept out of training: half stops it early, "
        "half sets the holdout threshold (all of it stops training under threshold: model)",
    )
    threshold: Literal["holdout", "model"] = Field(
        "holdout",
        description="holdout: the split-conformal (1 − fpr) quantile of the calibration "
        "half's scores; model: the one the model implies (Φ⁻¹(1 − fpr), or 0 for pinball)",
    )


def resolved_arch(config: QuantileConfig, level: str) -> str:
    """The quantile model's backbone: auto is an MLP on a node's own features at 0 hops (all
    the target saw), a GCN over its neighbourhood otherwise, a GIN for graphs."""
    arch = config.arch
    if arch == "auto":
        arch = "gin" if level == "graph" else ("mlp" if config.hops == 0 else "gcn")
    valid = ("gin",) if level == "graph" else ("mlp", "gcn", "sage")
    if arch not in valid:
        raise ConfigError(
            f"arch: '{arch}' does not fit {level}-level records; valid: auto, {', '.join(valid)}"
        )
    return arch


def quantile_model(
    config: QuantileConfig, arch: str, level: str, dims: tuple[int, int]
) -> nn.Module:
    """A backbone of the workbench's own (no dropout: σ is read in eval mode, so it must be
    learnt without the noise dropout adds in training)."""
    layers = 3 if level == "graph" else (2 if arch == "mlp" else max(2, config.hops))
    cfg = ModelConfig(arch=arch, hidden=config.hidden, layers=layers, dropout=0.0)
    return build_model(cfg, dims[0], dims[1], level)


def record_forward(inp: AttackInput, records: Candidates, mlp: bool) -> Forward:
    """The quantile model's outputs on ``records``: node level on the population graph (an
    MLP on the nodes' own features), graph level on the graphs themselves."""
    if records.level == "graph":
        batches = [
            Batch.from_data_list(list(records.graphs[i : i + GRAPH_BATCH]))
            for i in range(0, len(records.graphs), GRAPH_BATCH)
        ]
        return lambda m: torch.cat([m(b.x, b.edge_index, b.batch) for b in batches])
    graph = inp.knowledge.graph
    ids = torch.as_tensor(np.asarray(records.ids, dtype=np.int64))
    if mlp:
        x = graph.x[ids]
        return lambda m: m(x)
    return lambda m: m(graph.x, graph.edge_index)[ids]


def per_class(out: torch.Tensor, labels: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width`` outputs of each record's own class."""
    rows = out.view(out.shape[0], -1, width)
    return rows[torch.arange(out.shape[0]), labels]


def spread(pred: torch.Tensor) -> torch.Tensor:
    """The Gaussian model's σ from its second output, kept above MIN_STD."""
    return F.softplus(pred[:, 1]) + MIN_STD


def objective(pred: torch.Tensor, s: torch.Tensor, loss: str, tau: float) -> torch.Tensor:
    if loss == "pinball":
        diff = s - pred[:, 0]
        return torch.maximum(tau * diff, (tau - 1.0) * diff).mean()
    mu, std = pred[:, 0], spread(pred)
    return (0.5 * ((s - mu) / std) ** 2 + torch.log(std)).mean()


def fit_and_score(
    build: Callable[[], nn.Module],
    forward: Forward,
    s: np.ndarray,
    labels: np.ndarray,
    train: np.ndarray,
    stop: np.ndarray,
    config: QuantileConfig,
    tau: float,
    seed: int,
) -> np.ndarray:
    """Fits a fresh ``build()`` to the scores ``s`` of the pool's records ``train`` marks,
    stopping early on those ``stop`` marks (the pool comes first in ``s``) and returns every
    record's score: its z-score (gaussian) or its excess over the quantile (pinball, in
    ``s``'s units). The regression targets are ``s`` standardised on the training part."""
    pool = s[: train.size][train]
    centre, scale = pool.mean(), pool.std() + 1e-12
    target = torch.as_tensor((s - centre) / scale, dtype=torch.float32)
    y = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    fit_idx = torch.as_tensor(np.flatnonzero(train))
    val_idx = torch.as_tensor(np.flatnonzero(stop))
    width = 1 if config.loss == "pinball" else 2
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = build().train()  # no dropout: training and evaluation forwards agree
        opt = torch.optim.Adam(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        best, best_state, waited = float("inf"), None, 0
        for _ in range(config.epochs):
            pred = per_class(forward(model), y, width)
            held = float(objective(pred[val_idx].detach(), target[val_idx], config.loss, tau))
            if held < best:  # the weights that made ``pred``, before this step
                best, waited = held, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            elif (waited := waited + 1) >= PATIENCE:
                break
            opt.zero_grad()
            objective(pred[fit_idx], target[fit_idx], config.loss, tau).backward()
            opt.step()
    assert best_state is not None
    model.load_state_dict(best_state)
    with torch.no_grad():
        pred = per_class(forward(model.eval()), y, width).double()
    z = (s - centre) / scale
    mu = pred[:, 0].numpy(force=True)
    if config.loss == "pinball":
        return (z - mu) * scale
    return (z - mu) / spread(pred).numpy(force=True)


def pool_split(
    n: int, holdout: float, calibrate: bool, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, stop, calibrate) booleans over the pool's ``n`` records: a ``holdout`` share
    is kept out of training, half of it to stop early and half (``calibrate``; else none)
    to set the threshold, each part at least one record."""
    out = int(np.clip(round(n * holdout), 2 if calibrate else 1, n - 1))
    stopping = out - out // 2 if calibrate else out
    order = np.random.default_rng(seed).permutation(n)
    parts = [np.zeros(n, dtype=bool) for _ in range(3)]
    parts[0][order[out:]] = True
    parts[1][order[:stopping]] = True
    parts[2][order[stopping:out]] = True
    return parts[0], parts[1], parts[2]


class QuantileAttack:
    name = "mia-quantile"
    family = "membership"
    threat = ThreatModel(
        sees="the released model's answers (querier), every client's uploaded model (server), "
        "or the generators a CeFGC client received (client)",
        knows="the auxiliary pool (known non-members, to fit the quantile model; a client adds "
        "its own graphs), the population graph (node level)",
    )
    Config = QuantileConfig

    def run(self, inp: AttackInput, config: QuantileConfig, seed: int) -> AttackOutput:
        inp = adaptive_input(inp, config.features, self.name, seed)
        if config.adversary == "client":  # CeFGC's generators, by their denoising loss
            got = received_generators(inp, True, config.draws, seed, self.name)
            pool = generator_pool(inp, got.config)
            signals = {"generators": lambda r: -best_fit(got, r, config.draws, seed)}
        else:
            pool = inp.knowledge.aux
            signals = {
                name: lambda r, api=api: signal_scores(
                    query(api, r, config.hops), r.labels, config.signal
                )
                for name, api in observed_apis(inp, self.name).items()
            }
        return self.scored(inp, pool, signals, config, seed)

    def scored(
        self,
        inp: AttackInput,
        pool: Candidates,
        signals: dict[str, Callable[[Candidates], np.ndarray]],
        config: QuantileConfig,
        seed: int,
    ) -> AttackOutput:
        """Each observed model's signal (``signals``: name → the signal on records) regressed
        on the known non-members ``pool`` and read on the candidates (NaN signal: a record
        no observed model can have trained on, scored lowest)."""
        cands = inp.candidates
        if pool.ids.size < 10:
            raise NotApplicableError(
                f"{self.name}: needs an auxiliary pool of at least 10 records to fit the "
                f"quantile model (got {pool.ids.size}; raise aux_fraction)"
            )
        calibrated = config.threshold == "holdout"
        train, stop, calibration = pool_split(
            pool.ids.size, config.holdout, calibrated, derive_seed(seed, "quantile-holdout")
        )
        # the model's own threshold, per upload: the maximum over them keeps ``fpr``
        level = config.fpr / len(signals) if config.threshold == "model" else config.fpr
        if config.loss == "pinball" and level * train.sum() < MIN_EXCEEDING:
            raise NotApplicableError(
                f"fpr: {config.fpr} leaves {level * train.sum():.1f} of the {train.sum()} "
                f"training records above the pinball quantile (at least {MIN_EXCEEDING} are "
                "needed); raise fpr or use loss: gaussian"
            )
        records = union(pool, cands)
        arch = resolved_arch(config, records.level)
        forward = record_forward(inp, records, arch == "mlp")
        graph = records.graphs[0] if records.level == "graph" else inp.knowledge.graph
        width = 1 if config.loss == "pinball" else 2
        dims = (int(graph.x.shape[1]), width * inp.view.num_classes)

        def scores(name: str, signal: Callable[[Candidates], np.ndarray]) -> np.ndarray:
            out = fit_and_score(
                lambda: quantile_model(config, arch, records.level, dims),
                forward,
                signal(records),
                records.labels,
                train,
                stop,
                config,
                1.0 - level,
                derive_seed(seed, "quantile-model", name),
            )
            finite = np.isfinite(out)
            return np.where(finite, out, out[finite].min() - 1.0 if finite.any() else 0.0)

        per_model = {name: scores(name, signal) for name, signal in signals.items()}
        n = pool.ids.size
        if calibrated:
            held = np.max([out[:n][calibration] for out in per_model.values()], axis=0)
            threshold = conformal_threshold(held, config.fpr)
        else:
            threshold = 0.0 if config.loss == "pinball" else NormalDist().inv_cdf(1.0 - level)
        return per_model_output({k: out[n:] for k, out in per_model.items()}, threshold)


def generator_pool(inp: AttackInput, cfg: GeneratorConfig) -> Candidates:
    """The curious client's known non-members of the generators it received: the auxiliary
    pool and its own graphs (no other client holds them), those the generators could have
    trained on (at most ``max_nodes`` nodes)."""
    aux, local = inp.knowledge.aux, inp.view.local
    graphs = [*aux.graphs, *local.train, *local.val, *local.test]
    keep = [g for g in graphs if g.num_nodes <= cfg.max_nodes]
    labels = np.array([int(g.y.view(-1)[0]) for g in keep], dtype=np.int64)
    return Candidates("graph", np.full(len(keep), -1), labels, tuple(keep))


def conformal_threshold(held: np.ndarray, fpr: float) -> float:
    """Split conformal: the ⌈(n + 1)(1 − fpr)⌉-th smallest of ``n`` held-out non-member
    scores, so a fresh non-member scores above it with probability at most ``fpr`` (the
    largest one where the holdout is too small for that: then the FPR is not guaranteed)."""
    k = min(held.size, int(np.ceil((held.size + 1) * (1.0 - fpr))))
    return float(np.sort(held)[k - 1])


ATTACKS.register("mia-quantile")(QuantileAttack())
