"""Shadow and reference models: copies of the target's architecture that the adversary trains
itself on records it holds, to learn how a model behaves on its members and non-members.

Every model is trained centrally with the target's recipe (architecture, optimizer, learning
rate, epochs) on the subset of records its inclusion row selects. Node level: the subgraph of
the population graph induced by the selected nodes, all of them labelled; graph level: the
selected graphs. Jobs run in worker processes when ``jobs > 1``; every job trains with one
intra-op thread under its own seed, so ``jobs`` changes the wall time and never the numbers.

A ``ReferencePool`` lives for one cell: attacks asking for the same models (same records,
count, epochs and purpose) get the trained ones back instead of training them again."""

from __future__ import annotations

import hashlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from attacks.base import AttackInput, Candidates
from attacks.membership.observe import model_api, query
from workbench.errors import ConfigError
from workbench.models import ModelSpec
from workbench.seeding import derive_seed, seed_everything
from workbench.targets.training import (
    TrainingRecipe,
    make_optimizer,
    train_graph_epochs,
    train_node_epochs,
)


@dataclass(frozen=True)
class TrainJob:
    spec: ModelSpec
    recipe: TrainingRecipe
    seed: int
    node_data: Data | None  # node level: the induced training subgraph, every node labelled
    graphs: tuple[Data, ...]  # graph level: the training graphs


@contextmanager
def single_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train_job(job: TrainJob) -> dict[str, torch.Tensor]:
    """Trains one model and returns its weights (plain tensors pickle back cheaply)."""
    with single_thread():
        seed_everything(job.seed)
        model = job.spec.build()
        r = job.recipe
        opt = make_optimizer(r.optimizer, model, r.lr, r.weight_decay)
        if job.node_data is not None:
            train_node_epochs(model, job.node_data, opt, r.epochs)
        else:
            gen = torch.Generator().manual_seed(job.seed)
            train_graph_epochs(model, list(job.graphs), opt, r.epochs, r.batch_size, gen)
        return model.state_dict()


def induced_training_graph(graph: Data, ids: np.ndarray, labels: np.ndarray) -> Data:
    """The subgraph induced by population nodes ``ids``, all of them training nodes."""
    idx = torch.from_numpy(np.asarray(ids, dtype=np.int64))
    edge_index, _ = subgraph(idx, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
    return Data(
        x=graph.x[idx],
        edge_index=edge_index,
        y=torch.from_numpy(np.asarray(labels, dtype=np.int64)),
        train_mask=torch.ones(idx.numel(), dtype=torch.bool),
    )


def balanced_inclusion(n_models: int, n_records: int, seed: int) -> np.ndarray:
    """[n_models, n_records] boolean: each model takes a random half of the records, and each
    record is in exactly half of the models (Carlini et al.'s design), so every record has
    as many IN as OUT models."""
    if n_models < 2 or n_models % 2:
        raise ConfigError(f"num_references: must be an even number >= 2 (got {n_models})")
    rng = np.random.default_rng(seed)
    order = rng.random((n_models, n_records)).argsort(axis=0)
    return order < n_models // 2


def union(a: Candidates, b: Candidates) -> Candidates:
    return Candidates(
        a.level,
        np.concatenate([a.ids, b.ids]),
        np.concatenate([a.labels, b.labels]),
        tuple(a.graphs) + tuple(b.graphs),
    )


@dataclass(frozen=True)
class ReferenceOutputs:
    """Reference models' logits on the auxiliary pool followed by the candidates."""

    records: Candidates  # aux records, then candidates
    inclusion: np.ndarray  # [models, records]: which records each model trained on
    logits: torch.Tensor  # [models, records, classes]
    num_aux: int


def reference_outputs(
    inp: AttackInput, num_models: int, hops: int, epochs: int | None
) -> ReferenceOutputs:
    """LiRA and RMIA reference models: each trained on a random half of (auxiliary pool ∪
    candidates), every record in exactly half of them. The halves depend on the cell's pool
    seed only, so both attacks (and both modes) in a cell share one set of models."""
    records = union(inp.knowledge.aux, inp.candidates)
    pool = pool_of(inp)
    inclusion = balanced_inclusion(num_models, records.ids.size, derive_seed(pool.seed, "halves"))
    models = trained_models(inp, "halves", records, inclusion, epochs)
    logits = torch.stack([query(model_api(m, inp.knowledge), records, hops) for m in models])
    return ReferenceOutputs(records, inclusion, logits, inp.knowledge.aux_ids.size)


def pool_of(inp: AttackInput) -> ReferencePool:
    return inp.references if inp.references is not None else ReferencePool()


def trained_models(
    inp: AttackInput,
    purpose: str,
    records: Candidates,
    inclusion: np.ndarray,
    epochs: int | None,
) -> list[nn.Module]:
    """Models of the target's architecture and recipe (``epochs`` overrides its epoch count),
    one per inclusion row, from the cell's shared pool when the runner provides one."""
    know = inp.knowledge
    recipe = know.recipe if epochs is None else replace(know.recipe, epochs=epochs)
    return pool_of(inp).models(purpose, records, inclusion, know.spec, recipe, know.graph)


def subset(records: Candidates, keep: np.ndarray) -> Candidates:
    graphs = tuple(g for g, k in zip(records.graphs, keep, strict=False) if k)
    return Candidates(records.level, records.ids[keep], records.labels[keep], graphs)


class ReferencePool:
    """Trains models for a cell's attacks and keeps them so later attacks reuse them."""

    def __init__(self, jobs: int = 1, seed: int = 0) -> None:
        if jobs < 1:
            raise ConfigError(f"jobs: must be an integer >= 1 (got {jobs})")
        self.jobs = jobs
        self.seed = seed
        self._cache: dict[str, list[dict[str, torch.Tensor]]] = {}
        self.trained = 0  # models trained so far (cache misses), for tests and benchmarks

    def models(
        self,
        purpose: str,
        records: Candidates,
        inclusion: np.ndarray,
        spec: ModelSpec,
        recipe: TrainingRecipe,
        graph: Data | None,
    ) -> list[nn.Module]:
        """One model per inclusion row, trained on the records that row selects."""
        key = self._key(purpose, records, inclusion, spec, recipe)
        if key not in self._cache:
            jobs = [
                self._job(records, row, spec, recipe, graph, derive_seed(self.seed, key, i))
                for i, row in enumerate(inclusion)
            ]
            self._cache[key] = self._run(jobs)
            self.trained += len(jobs)
        out = []
        for state in self._cache[key]:
            model = spec.build()
            model.load_state_dict(state)
            out.append(model.eval())
        return out

    def _run(self, jobs: list[TrainJob]) -> list[dict[str, torch.Tensor]]:
        if self.jobs == 1 or len(jobs) == 1:
            return [train_job(j) for j in jobs]
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(self.jobs, len(jobs)), mp_context=ctx) as ex:
            return list(ex.map(train_job, jobs))

    @staticmethod
    def _job(
        records: Candidates,
        row: np.ndarray,
        spec: ModelSpec,
        recipe: TrainingRecipe,
        graph: Data | None,
        seed: int,
    ) -> TrainJob:
        if records.level == "node":
            assert graph is not None, "node-level reference models need the population graph"
            data = induced_training_graph(graph, records.ids[row], records.labels[row])
            return TrainJob(spec, recipe, seed, data, ())
        picked = tuple(g for g, keep in zip(records.graphs, row, strict=True) if keep)
        return TrainJob(spec, recipe, seed, None, picked)

    @staticmethod
    def _key(purpose, records, inclusion, spec, recipe) -> str:
        h = hashlib.sha256()
        for part in (purpose, repr(spec), repr(recipe), records.level):
            h.update(str(part).encode())
        h.update(np.ascontiguousarray(records.ids).tobytes())
        h.update(np.packbits(inclusion).tobytes())
        h.update(str(inclusion.shape).encode())
        return h.hexdigest()[:16]
