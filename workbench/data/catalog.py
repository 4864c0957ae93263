"""Datasets by name, and where their files live.

Data root: ``--data-root``, else ``$FGLWB_DATA``, else a per-user cache. When a dataset's
``raw/`` folder is found under the data root, PyG is pointed at a mirror folder in the
processing cache (``$FGLWB_CACHE``) whose ``raw`` is a symlink to it, so a read-only data root
works and ``processed/`` never lands beside the raw files. Otherwise PyG downloads into the
data root as usual."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field
from torch_geometric.utils import degree, to_undirected

from fgl_workbench.data.datasets import Dataset, GraphDataset, Level, NodeDataset, graph_data
from fgl_workbench.data.interbank import InterbankParams, interbank
from fgl_workbench.data.safe_load import UnsafeDataError, data_files_only, refuse_unsafe_processed
from fgl_workbench.data.synthetic import (
    CSBMParams,
    SyntheticGraphsParams,
    csbm,
    synthetic_graphs,
)
from fgl_workbench.errors import ConfigError, DatasetNotFoundError
from fgl_workbench.registry import Registry

_USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fgl-workbench"


def data_root(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("FGLWB_DATA")
    return Path(env).expanduser() if env else _USER_CACHE / "data"


def cache_root() -> Path:
    env = os.environ.get("FGLWB_CACHE")
    return Path(env).expanduser() if env else _USER_CACHE / "processed"


def private_cache(folder: Path) -> None:
    """Make the processing cache private to the user (0700), or check that an existing one
    is: files in it are loaded, so a cache another user can write to is refused."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise UnsafeDataError(
            f"{folder}: the dataset cache is owned by uid {info.st_uid} or writable by others "
            f"(mode {info.st_mode & 0o777:o}); make it yours with mode 700, or set FGLWB_CACHE"
        )


class NodeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    normalize_features: bool = Field(
        False, description="rows scaled to sum 1 (PyG NormalizeFeatures), as GCOND/FedGC load"
    )


class TUParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    use_node_attr: bool = False
    max_degree: int = Field(
        64, ge=1, le=10_000, description="cap of the one-hot degree features for datasets without x"
    )


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    level: Level
    params: type[BaseModel]
    build: Callable[[Path, BaseModel], Dataset]
    folder: str | None = None  # relative to the data root; None for embedded datasets
    expected_files: tuple[str, ...] = ()


DATASETS: Registry[DatasetSpec] = Registry("dataset")


def load_dataset(name: str, params: dict | None = None, root: str | Path | None = None) -> Dataset:
    spec = DATASETS.get(name, field="dataset")
    try:
        parsed = spec.params(**(params or {}))
    except Exception as exc:  # pydantic.ValidationError; re-raised with the dataset named
        raise ConfigError(f"dataset '{name}' params: {exc}") from None
    base = data_root(root)
    if spec.folder is None:
        return spec.build(base, parsed)
    # Two processes (parallel suites, Ray workers) processing the same dataset at once would
    # read each other's half-written processed/ files: one processes, the other waits.
    key = hashlib.sha256(str((base / spec.folder).resolve()).encode()).hexdigest()[:12]
    private_cache(cache_root())
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with FileLock(locks / f"{key}.lock"), data_files_only():
        folder = _pyg_folder(spec, base)
        refuse_unsafe_processed(folder / "processed")
        return spec.build(folder, parsed)


def _pyg_folder(spec: DatasetSpec, base: Path) -> Path:
    """The folder PyG sees as ``<dataset>/`` (it holds ``raw/`` and gets ``processed/``)."""
    assert spec.folder is not None
    raw = base / spec.folder / "raw"
    if raw.is_dir() and all((raw / f).exists() for f in spec.expected_files):
        key = hashlib.sha256(str(raw.resolve()).encode()).hexdigest()[:12]
        mirror = cache_root() / key / spec.folder
        mirror.mkdir(parents=True, exist_ok=True)
        link = mirror / "raw"
        if not link.exists():
            link.symlink_to(raw.resolve(), target_is_directory=True)
        return mirror
    return base / spec.folder


def _download_guard(spec: DatasetSpec, folder: Path, make: Callable[[], object]) -> object:
    try:
        return make()
    except UnsafeDataError:
        raise
    except Exception as exc:
        raise DatasetNotFoundError(
            f"dataset '{spec.name}' is not in {folder / 'raw'} and could not be downloaded "
            f"({type(exc).__name__}: {exc}). Expected files there: "
            f"{', '.join(spec.expected_files)}. Set --data-root or FGLWB_DATA to a folder holding "
            f"'{spec.folder}/raw'."
        ) from None


def _node_dataset(
    spec: DatasetSpec, folder: Path, make: Callable[[], object], params: BaseModel
) -> NodeDataset:
    assert isinstance(params, NodeParams)
    ds = _download_guard(spec, folder, make)
    data = ds[0]  # type: ignore[index]
    data.y = data.y.view(-1).long()
    # Partitioners and cut-edge accounting assume an undirected graph (Actor, WebKB are not).
    edge_index = to_undirected(data.edge_index, num_nodes=data.num_nodes)
    x = data.x.float()
    if params.normalize_features:  # non-negative bag-of-words rows: divide by the row sum
        x = x / x.sum(1, keepdim=True).clamp(min=1.0)
    keep = {"x": x, "edge_index": edge_index, "y": data.y}
    public = None
    if getattr(data, "train_mask", None) is not None and data.train_mask.dim() == 1:
        masks = (data.train_mask, data.val_mask, data.test_mask)
        public = tuple(m.nonzero().view(-1).numpy() for m in masks)
    return NodeDataset(
        name=spec.name,
        data=type(data)(**keep),
        num_classes=int(data.y.max()) + 1,
        public_split=public,  # type: ignore[arg-type]
    )


def _register_planetoid(name: str) -> None:
    low = name.lower()
    files = tuple(f"ind.{low}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph"))

    def build(folder: Path, params: BaseModel) -> Dataset:
        from torch_geometric.datasets import Planetoid

        return _node_dataset(spec, folder, lambda: Planetoid(str(folder.parent), name), params)

    spec = DatasetSpec(name, "node", NodeParams, build, name, (*files, f"ind.{low}.test.index"))
    DATASETS.register(name)(spec)


def _register_webkb(name: str) -> None:
    low = name.lower()
    files = ("out1_node_feature_label.txt", "out1_graph_edges.txt")

    def build(folder: Path, params: BaseModel) -> Dataset:
        from torch_geometric.datasets import WebKB

        return _node_dataset(spec, folder, lambda: WebKB(str(folder.parent), name), params)

    spec = DatasetSpec(name, "node", NodeParams, build, f"WebKB/{low}", files)
    DATASETS.register(name)(spec)


def _build_actor(folder: Path, params: BaseModel) -> Dataset:
    from torch_geometric.datasets import Actor

    return _node_dataset(_ACTOR, folder, lambda: Actor(str(folder)), params)


_ACTOR = DatasetSpec(
    "Actor",
    "node",
    NodeParams,
    _build_actor,
    "Actor",
    ("out1_node_feature_label.txt", "out1_graph_edges.txt"),
)
DATASETS.register("Actor")(_ACTOR)


def _register_tu(name: str) -> None:
    files = (f"{name}_A.txt", f"{name}_graph_indicator.txt", f"{name}_graph_labels.txt")

    def build(folder: Path, params: BaseModel) -> Dataset:
        from torch_geometric.datasets import TUDataset

        assert isinstance(params, TUParams)
        ds = _download_guard(
            spec,
            folder,
            lambda: TUDataset(str(folder.parent), name, use_node_attr=params.use_node_attr),
        )
        graphs = [ds[i] for i in range(len(ds))]  # type: ignore[arg-type]
        structural = graphs[0].x is None
        if structural:
            graphs = _with_degree_features(graphs, params.max_degree)
        records = [graph_data(g.x, g.edge_index, int(g.y.view(-1)[0])) for g in graphs]
        return GraphDataset(
            name=name, graphs=records, num_classes=ds.num_classes, structural_features=structural
        )  # type: ignore[attr-defined]

    spec = DatasetSpec(name, "graph", TUParams, build, f"TUDataset/{name}", files)
    DATASETS.register(name)(spec)


def _with_degree_features(graphs: list, max_degree: int) -> list:
    """One-hot degree features (capped) for datasets such as IMDB that ship none."""
    out = []
    for g in graphs:
        deg = degree(g.edge_index[0], num_nodes=g.num_nodes).long().clamp(max=max_degree)
        g = g.clone()
        g.x = torch.nn.functional.one_hot(deg, max_degree + 1).float()
        out.append(g)
    return out


for _name in ("Cora", "CiteSeer", "PubMed"):
    _register_planetoid(_name)
for _name in ("Cornell", "Texas", "Wisconsin"):
    _register_webkb(_name)
for _name in (
    "MUTAG",
    "PROTEINS",
    "ENZYMES",
    "IMDB-BINARY",
    "IMDB-MULTI",
    "NCI1",
    "PTC_MR",
    "AIDS",
    "BZR",
    "COX2",
):
    _register_tu(_name)


class MixtureParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    members: list[str] = Field(min_length=2, description="graph datasets to combine")
    member_params: dict[str, dict] = Field(default_factory=dict)
    features: Literal["overlap", "disjoint"] = Field(
        "overlap",
        description="overlap: every member's features zero-padded to the widest member's, so "
        "column j means different things in different members; disjoint: each member's "
        "features in columns of their own, so a model's first layer has a block per member "
        "(GCFL keeps each client's input layer local)",
    )


def _build_mixture(root: Path, params: BaseModel) -> Dataset:
    """Several graph datasets as one, for cross-dataset federations: node features are
    zero-padded (to the widest member, or into a block per member), each member keeps its own
    label range (labels are offset), and every graph records its member index in ``source``."""
    assert isinstance(params, MixtureParams)
    members = []
    for name in params.members:
        ds = load_dataset(name, params.member_params.get(name), root)
        if not isinstance(ds, GraphDataset):
            raise ConfigError(f"graph-mixture.members: '{name}' is not a graph dataset")
        members.append(ds)
    widths = [ds.num_features for ds in members]
    disjoint = params.features == "disjoint"
    width = sum(widths) if disjoint else max(widths)
    graphs, offset = [], 0
    for source, ds in enumerate(members):
        left = sum(widths[:source]) if disjoint else 0
        for g in ds.graphs:
            x = torch.nn.functional.pad(g.x, (left, width - left - g.x.size(1)))
            record = graph_data(x, g.edge_index, int(g.y.view(-1)[0]) + offset)
            record.source = source
            graphs.append(record)
        offset += ds.num_classes
    name = "+".join(params.members)
    structural = any(ds.structural_features for ds in members)
    return GraphDataset(name, graphs, offset, tuple(params.members), structural)


DATASETS.register("graph-mixture")(
    DatasetSpec("graph-mixture", "graph", MixtureParams, _build_mixture)
)
DATASETS.register("csbm")(
    DatasetSpec("csbm", "node", CSBMParams, lambda _r, p: csbm(p))  # type: ignore[arg-type]
)
DATASETS.register("interbank")(
    DatasetSpec("interbank", "node", InterbankParams, lambda _r, p: interbank(p))  # type: ignore[arg-type]
)
DATASETS.register("synthetic-graphs")(
    DatasetSpec(
        "synthetic-graphs",
        "graph",
        SyntheticGraphsParams,
        lambda _r, p: synthetic_graphs(p),  # type: ignore[arg-type]
    )
)
