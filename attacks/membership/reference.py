"""Shadow and reference models: models the adversary trains itself, the way the target was
trained, on records it holds, to learn how a model behaves on its members and non-members.

A model is trained by running the target's own recipe (its ``fit`` with the released
model's stopping point) on a federation built from the adversary's records: the records are
cut into as many clients as the target had (METIS communities at node level, so local graphs
keep their edges; random shares at graph level). The records an inclusion row selects are the
model's training records (members); at node level the others stay in the clients' graphs as
unlabelled nodes, exactly as the target's non-members sit in its clients' graphs.

Jobs run in up to ``jobs`` worker processes (spawned: scripts that call this with ``jobs > 1``
need the usual ``if __name__ == "__main__":`` guard). A fresh worker costs about
``WORKER_STARTUP_SECONDS`` (importing torch and PyG), so the first job runs in this process and
its time decides whether the rest is worth sending to workers; once started, workers live as
long as the pool (one cell). Every job trains with one intra-op thread under its own seed, so
``jobs`` changes the wall time, never the numbers.

A ``ReferencePool`` lives for one cell: attacks asking for the same models (same records,
inclusion, recipe and purpose) get the trained ones back instead of training them again."""

from __future__ import annotations

import hashlib
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import Field
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge, QuerierView
from fgl_workbench.attacks.base import AttackInput
from fgl_workbench.attacks.membership.observe import QueryConfig, model_api, query
from fgl_workbench.data.datasets import Dataset, GraphDataset, NodeDataset
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import PARTITIONERS, ClientPart, Partition
from fgl_workbench.device import adopt_device
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelSpec
from fgl_workbench.query import GraphOwnerRoutedQueryAPI, OwnerRoutedQueryAPI, Personalised
from fgl_workbench.seeding import derive_seed
from fgl_workbench.targets import TARGETS, TrainedTarget
from fgl_workbench.targets.batched import batchable, train_shared
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.thread_limits import intra_op

EMPTY = np.zeros(0, dtype=np.int64)
WORKER_STARTUP_SECONDS = (
    5.0  # `import fgl_workbench.attacks.membership.reference` in a fresh interpreter
)
BATCH = 16  # models trained together (memory grows with it: K × nodes × hidden)
CLIENT, OWNER = "client.", "owner"  # a personalised model's keys in its flat state


@dataclass(frozen=True)
class TrainJob:
    recipe: TrainingRecipe
    partition: Partition  # over positions in the adversary's dataset
    seed: int


_WORKER_DATASET: Dataset | None = None


def _init_worker(dataset: Dataset, device: torch.device) -> None:
    """A worker keeps the dataset and works on the cell's device, as the cell does."""
    global _WORKER_DATASET
    _WORKER_DATASET = dataset
    adopt_device(device)


def train_job(job: TrainJob, dataset: Dataset | None = None) -> dict[str, torch.Tensor]:
    """Runs the recipe on one federation; returns the released weights (plain tensors pickle
    back cheaply). Worker processes get the dataset once, at start-up."""
    dataset = dataset if dataset is not None else _WORKER_DATASET
    assert dataset is not None
    with intra_op(1):
        federation = build_federation(dataset, job.partition)
        target = TARGETS.get(job.recipe.target)
        trained = target.fit(federation, job.recipe.config, list(job.recipe.defenses), job.seed)
        return released_state(trained)


def released_state(trained: TrainedTarget) -> dict[str, torch.Tensor]:
    """The weights a model answers with: the global model's and, where the target deploys a
    model per client answering each node or graph by its owner's (FedAvg's ``fine_tune`` and
    ``keep_local``, O-pFGL), also every client's under ``client.<k>.`` and the owner table
    (item → client)."""
    state = trained.global_model.state_dict()
    if isinstance(trained.query, OwnerRoutedQueryAPI | GraphOwnerRoutedQueryAPI):
        for k, model in trained.client_models.items():
            state.update({f"{CLIENT}{k}.{name}": t for name, t in model.state_dict().items()})
        state[OWNER] = torch.as_tensor(trained.query.owner)
    return state


def answering_model(
    state: dict[str, torch.Tensor],
    spec: ModelSpec,
    records: Candidates,
    graph: Data | None,
    deployed: bool,
) -> nn.Module | Personalised:
    """The model ``released_state`` kept, rebuilt: the personalised deployment where there
    is one and the adversary queries ``deployed`` models (it routes each record by the client
    that held it, every other node or graph to none), else the global model (what a server
    observes: the clients' uploads before fine-tuning)."""
    weights: dict[int, dict[str, torch.Tensor]] = {}
    shared = {}
    for key, t in state.items():
        if key.startswith(CLIENT):
            k, name = key.removeprefix(CLIENT).split(".", 1)
            weights.setdefault(int(k), {})[name] = t
        elif key != OWNER:
            shared[key] = t
    if OWNER not in state or not deployed:
        model = spec.build()
        model.load_state_dict(shared)
        return model.eval()
    models = {}
    for k, w in weights.items():
        models[k] = spec.build()
        models[k].load_state_dict(w)
        models[k].eval()
    population = graph.num_nodes if graph is not None else int(records.ids.max(initial=-1)) + 1
    owner = np.full(population, -1, dtype=np.int64)
    owner[records.ids] = state[OWNER].numpy(force=True)  # item i of the dataset is record i
    return Personalised(models, owner)


def adversary_dataset(records: Candidates, graph: Data | None, num_classes: int) -> Dataset:
    """The adversary's records as a dataset, item i being ``records`` entry i. Node level:
    the subgraph of the population graph they induce."""
    labels = torch.as_tensor(np.asarray(records.labels, dtype=np.int64))
    if records.level == "graph":
        return GraphDataset("adversary", list(records.graphs), num_classes)
    assert graph is not None, "node-level shadow and reference models need the population graph"
    idx = torch.as_tensor(np.asarray(records.ids, dtype=np.int64))
    edge_index, _ = subgraph(idx, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
    return NodeDataset(
        "adversary", Data(x=graph.x[idx], edge_index=edge_index, y=labels), num_classes
    )


def induced_subgraph(graph: Data, ids: np.ndarray) -> Data:
    """The subgraph of ``graph`` induced by node ``ids``, node i being ``ids[i]``."""
    idx = torch.as_tensor(np.asarray(ids, dtype=np.int64))
    edge_index, _ = subgraph(idx, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
    return Data(x=graph.x[idx], edge_index=edge_index, num_nodes=idx.numel())


def inclusion_matrix(n_models: int, n_records: int, fraction: float, seed: int) -> np.ndarray:
    """[n_models, n_records] boolean: every record is a training record of exactly
    round(n_models · fraction) models (at least one, and at least one model without it), the
    balanced design of Carlini et al., so every record has IN and OUT models."""
    if n_models < 2:
        raise ConfigError(f"num_references: must be >= 2 (got {n_models})")
    m = int(np.clip(round(n_models * fraction), 1, n_models - 1))
    rng = np.random.default_rng(seed)
    return rng.random((n_models, n_records)).argsort(axis=0) < m


def training_fraction(recipe: TrainingRecipe, n_records: int) -> float:
    """The share of the adversary's records a model trains on: as many as the target trained
    on (its training-set size is public), at most half, so OUT models exist for everyone."""
    return min(recipe.train_size / max(n_records, 1), 0.5)


def union(a: Candidates, b: Candidates) -> Candidates:
    return Candidates(
        a.level,
        np.concatenate([a.ids, b.ids]),
        np.concatenate([a.labels, b.labels]),
        tuple(a.graphs) + tuple(b.graphs),
    )


def subset(records: Candidates, keep: np.ndarray) -> Candidates:
    """The records a boolean mask or an index array picks, in that order."""
    idx = np.flatnonzero(keep) if keep.dtype == bool else np.asarray(keep)
    graphs = tuple(records.graphs[i] for i in idx) if records.graphs else ()
    return Candidates(records.level, records.ids[idx], records.labels[idx], graphs)


@dataclass(frozen=True)
class ReferenceOutputs:
    """Reference models' logits on the auxiliary pool followed by the candidates."""

    records: Candidates  # aux records, then candidates
    inclusion: np.ndarray  # [models, records]: which records each model trained on
    logits: torch.Tensor  # [models, records, classes]
    num_aux: int


class TrainedModelsConfig(QueryConfig):
    """Settings of the attacks that train their own models (shadow, reference)."""

    trained_as: Literal["target", "centralized"] = Field(
        "target",
        description="target: rerun the target's own recipe (Kerckhoffs); centralized: a plain "
        "model of the released architecture trained centrally on the records (the shadow of "
        "FedGC's paper; cheap when the target's recipe is not)",
    )


class ReferenceConfig(TrainedModelsConfig):
    """Settings of the attacks that calibrate with reference models (LiRA, RMIA)."""

    num_references: int = Field(
        16, ge=2, le=512, description="models trained with the target's recipe (Carlini: 64+)"
    )
    reference_fraction: float | None = Field(
        None,
        gt=0.0,
        le=0.5,
        description="share of (aux pool ∪ candidates) each reference trains on; default: as "
        "many records as the target trained on, at most half; 0.5: Carlini et al.'s halves",
    )


def reference_outputs(inp: AttackInput, config: ReferenceConfig) -> ReferenceOutputs:
    """LiRA and RMIA reference models, trained on draws from (auxiliary pool ∪ candidates).
    The draws depend on the cell's pool seed and the records' ids only (not on the order the
    evaluator lists candidates in), so both attacks and both modes in a cell share models."""
    records = union(inp.knowledge.aux, inp.candidates)
    pool = pool_of(inp)
    fraction = config.reference_fraction or training_fraction(
        inp.knowledge.recipe, records.ids.size
    )
    canonical = inclusion_matrix(
        config.num_references, records.ids.size, fraction, derive_seed(pool.seed, "references")
    )
    inclusion = np.empty_like(canonical)
    inclusion[:, np.argsort(records.ids, kind="stable")] = canonical
    models = trained_models(inp, "references", records, inclusion, config.trained_as)
    api = [model_api(m, inp.knowledge) for m in models]
    logits = torch.stack([query(a, records, config.hops) for a in api])
    return ReferenceOutputs(records, inclusion, logits, inp.knowledge.aux_ids.size)


def pool_of(inp: AttackInput) -> ReferencePool:
    return inp.references if inp.references is not None else ReferencePool()


def adversary_recipe(knowledge: BackgroundKnowledge, trained_as: str) -> TrainingRecipe:
    """The recipe the adversary's own models are trained with: the target's, or a plain
    centralised one for the released architecture (Kipf & Welling's GCN schedule: Adam 0.01,
    weight decay 5e-4, 200 epochs, the last one kept, as the adversary holds no validation
    records of its own)."""
    recipe = knowledge.recipe
    if trained_as == "target":
        return recipe
    config = {
        "model": knowledge.spec.config.model_dump(),
        **CENTRALIZED_SCHEDULE,
        "release": "last",
        # an inductively trained target's shadows train inductively too (its recipe is known)
        "inductive": bool(recipe.config.get("inductive", False)),
    }
    # and so do a target's whose federation trained inductively
    return TrainingRecipe("centralized", config, 1, recipe.train_size, inductive=recipe.inductive)


CENTRALIZED_SCHEDULE = {"epochs": 200, "lr": 0.01, "weight_decay": 5e-4}


def trained_models(
    inp: AttackInput,
    purpose: str,
    records: Candidates,
    inclusion: np.ndarray,
    trained_as: str = "target",
) -> list[nn.Module | Personalised]:
    """Models trained with the adversary's recipe, one per inclusion row, from the cell's
    shared pool when the runner provides one."""
    know = inp.knowledge
    recipe = adversary_recipe(know, trained_as)
    deployed = isinstance(inp.view, QuerierView)  # a server sees uploads, not deployments
    pool = pool_of(inp)
    return pool.models(purpose, records, inclusion, recipe, know.spec, know.graph, deployed)


class ReferencePool:
    """Trains models for a cell's attacks and keeps them so later attacks reuse them. Use it
    as a context manager (or call ``close``) so its worker processes end with the cell."""

    def __init__(self, jobs: int = 1, seed: int = 0, batched: bool = True) -> None:
        """``batched=False`` trains every model on its own even where ``train_batched``
        could train them together (the benchmark's and the equality test's reference)."""
        if jobs < 1:
            raise ConfigError(f"jobs: must be an integer >= 1 (got {jobs})")
        self.jobs = jobs
        self.seed = seed
        self.batched = batched
        self._cache: dict[str, list[dict[str, torch.Tensor]]] = {}
        self._executor: ProcessPoolExecutor | None = None
        self._executor_dataset: Dataset | None = None
        self._datasets: dict[str, Dataset] = {}
        self.trained = 0  # models trained so far (cache misses), for tests and benchmarks

    def __enter__(self) -> ReferencePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = self._executor_dataset = None

    def models(
        self,
        purpose: str,
        records: Candidates,
        inclusion: np.ndarray,
        recipe: TrainingRecipe,
        spec: ModelSpec,
        graph: Data | None,
        deployed: bool = True,
    ) -> list[nn.Module | Personalised]:
        """One model per inclusion row, trained on the records that row selects: as deployed
        (personalised where the target is) or, ``deployed=False``, its global model."""
        order = np.argsort(records.ids, kind="stable")  # the same models in any record order
        records, inclusion = subset(records, order), inclusion[:, order]
        key = self._key(purpose, records, inclusion, recipe)  # seeds the models
        features = features_digest(records, graph)
        slot = key + features  # models of other features (an adaptive attacker's) are others
        if slot not in self._cache:
            dataset = self._dataset(records, graph, spec.num_classes, features)
            shards = self._shards(dataset, recipe.num_clients, derive_seed(self.seed, key))
            jobs = [
                TrainJob(
                    recipe,
                    federation_of(records.level, shards, row, recipe.inductive),
                    derive_seed(self.seed, key, i),
                )
                for i, row in enumerate(inclusion)
            ]
            self._cache[slot] = self._run(jobs, dataset, spec)
            self.trained += len(jobs)
        return [
            answering_model(state, spec, records, graph, deployed) for state in self._cache[slot]
        ]

    def _dataset(
        self, records: Candidates, graph: Data | None, num_classes: int, features: str
    ) -> Dataset:
        """One dataset object per record set, so workers started for it can be reused."""
        ids = records.level.encode() + records.ids.tobytes() + features.encode()
        tag = hashlib.sha256(ids).hexdigest()
        if tag not in self._datasets:
            self._datasets[tag] = adversary_dataset(records, graph, num_classes)
        return self._datasets[tag]

    def _run(
        self, jobs: list[TrainJob], dataset: Dataset, spec: ModelSpec
    ) -> list[dict[str, torch.Tensor]]:
        """All models in one batched run where the recipe allows it (``train_shared``),
        else one job at a time, on workers when that saves time."""
        parts = [jobs[i : i + BATCH] for i in range(0, len(jobs), BATCH)]
        recipe = jobs[0].recipe
        # every part checked (and its shared subgraphs built once) before any trains
        found = (
            [batchable(recipe, spec, dataset, [j.partition for j in p]) for p in parts]
            if self.batched
            else [None]
        )
        shared = [s for s in found if s is not None]
        if len(shared) == len(parts):
            seeds = [[j.seed for j in p] for p in parts]
            return [
                state
                for s, ks in zip(shared, seeds, strict=True)
                for state in train_shared(recipe, spec, s, ks)
            ]
        start = time.perf_counter()
        first = train_job(jobs[0], dataset)
        per_job, rest = time.perf_counter() - start, jobs[1:]
        workers = min(self.jobs, len(rest))
        saved = per_job * len(rest) * (1 - 1 / max(workers, 1))
        if workers < 2 or (self._executor is None and saved < WORKER_STARTUP_SECONDS):
            return [first] + [train_job(j, dataset) for j in rest]
        return [first] + list(self._workers(dataset).map(train_job, rest))

    def _workers(self, dataset: Dataset) -> ProcessPoolExecutor:
        """The pool's worker processes, started once; restarted only for another dataset."""
        if self._executor is not None and self._executor_dataset is not dataset:
            self.close()
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(dataset, torch.get_default_device()),
            )
            self._executor_dataset = dataset
        return self._executor

    @staticmethod
    def _shards(dataset: Dataset, num_clients: int, seed: int) -> list[np.ndarray]:
        """The adversary's records cut into clients the way a federation would be."""
        k = max(1, min(num_clients, dataset.num_items // 4))
        method = "metis" if dataset.level == "node" else "iid"
        spec = PARTITIONERS.get(method)
        rng = np.random.default_rng(seed)
        shares = spec.split(dataset, np.arange(dataset.num_items), k, rng, spec.params())
        return [np.sort(s) for s in shares if len(s)]

    @staticmethod
    def _key(purpose, records, inclusion, recipe) -> str:
        h = hashlib.sha256()
        for part in (purpose, recipe.identity(), records.level, inclusion.shape):
            h.update(str(part).encode())
        h.update(np.ascontiguousarray(records.ids).tobytes())
        h.update(np.packbits(inclusion).tobytes())
        return h.hexdigest()[:16]


def features_digest(records: Candidates, graph: Data | None) -> str:
    """A digest of the features node-level models train on (an adaptive attacker replaces
    them with its own encoding); empty at graph level, where the records carry them."""
    if records.level == "graph" or graph is None:
        return ""
    rows = graph.x[torch.as_tensor(np.asarray(records.ids, dtype=np.int64))]
    return hashlib.sha256(rows.contiguous().numpy(force=True).tobytes()).hexdigest()[:16]


def federation_of(
    level: str,
    shards: list[np.ndarray],
    members: np.ndarray,
    inductive: bool = False,
) -> Partition:
    """One model's federation: each shard is a client whose training records are its members;
    the client holds the others too, as the target's clients hold their non-member (test)
    records: at node level unlabelled in its graph, at graph level as test graphs, so a
    personalised deployment answers them by that client's model, as the target answers its
    clients' test graphs. Clients with no member are left out (nothing to train on). For an
    ``inductive`` target each client trains on the subgraph its members induce instead, the
    others absent, as the target's clients did."""
    clients = []
    for shard in shards:
        train = shard[members[shard]]
        if train.size:
            test = EMPTY if level == "node" else shard[~members[shard]]
            clients.append(ClientPart(len(clients), shard, train, EMPTY, test))
    membership = "inductive" if inductive else "transductive"
    return Partition(level, "adversary", tuple(clients), EMPTY, membership=membership)
