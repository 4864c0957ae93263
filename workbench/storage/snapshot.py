"""A trained target kept on disk, so attacks can be run against it later without retraining
(``fgl-workbench attack RUN_DIR --attack ...``).

A snapshot holds plain data only (tensors, numbers, strings, bytes, lists and dicts): the
released models' weights, the transcript with the payloads it kept, the ledger's events, the
recipe and the utility. It is read back with ``torch.load(weights_only=True)``, which refuses
anything else, so opening a results folder someone sent cannot run their code. What cannot be
kept that way is left out: heads beside the GNN (CE-FedGNN's edge head, which no attack
reads) and a plug-in's query API of a kind not listed here (attacks querying it report "not
applicable"). The clients' CKKS secret key (CeFGC+, O-pFGL under CKKS) is kept only when the
run asks (``keep_client_secrets``), so a curious client's attacks run offline too; otherwise
the snapshot records that it was withheld and those attacks say what they need."""

from __future__ import annotations

import dataclasses
import io
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, SkipValidation
from torch_geometric.data import Data

import fgl_workbench.accountants.events as events
from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.accountants.scope import Caveat, NoGuarantee, Scope
from fgl_workbench.data.datasets import GraphDataset, NodeDataset
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.metric_dp import EmbeddingRelease, MetricReleases
from fgl_workbench.defenses.secure_aggregation import Ciphertext, KeyHolder, SecureAggConfig
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.query import (
    ClientDeployments,
    GraphOwnerRoutedQueryAPI,
    GraphQueryAPI,
    InductiveQueryAPI,
    NodeQueryAPI,
    OwnerRoutedQueryAPI,
    TableQueryAPI,
)
from fgl_workbench.registry import reading_untrusted
from fgl_workbench.storable import NotStorableError, stored_type, type_ref
from fgl_workbench.storage.rows import TEXT_CAP, Text, checked
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.transcript import Message, Transcript

FORMAT = 2
SHAPE_CAP = 8  # dimensions of a stored tensor
DEPTH_CAP = 32  # nesting of the stored data


class SnapshotError(ConfigError):
    """A trained target cannot be stored or restored as plain data."""


Tensor = Annotated[torch.Tensor, SkipValidation]  # checked by ``check_tensors``


class _Stored(BaseModel):
    """A part of a snapshot: the types its restoring relies on, strictly."""

    model_config = ConfigDict(strict=True, arbitrary_types_allowed=True)


class StoredDefense(_Stored):
    name: Text
    params: dict[str, Any]


class StoredRecipe(_Stored):
    target: Text
    config: Any
    num_clients: Annotated[int, Field(ge=1)]
    train_size: Annotated[int, Field(ge=0)]
    defenses: list[StoredDefense]
    inductive: bool = False  # written only when true


class StoredMessage(_Stored):
    round: int
    sender: Text
    receiver: Text
    kind: Text
    nbytes: Annotated[int, Field(ge=0)]
    payload: Any


class StoredClient(_Stored):
    ids: Tensor
    edge_index: Tensor


class StoredServed(_Stored):
    model: dict[str, Tensor] | None
    clients: list[StoredClient]
    num_nodes: Annotated[int, Field(ge=0)]


class StoredQuery(_Stored, extra="allow"):
    kind: Text


class StoredKeys(_Stored):
    config: dict[str, Any]
    secret: bytes


class Manifest(_Stored):
    """What a snapshot holds at its top level (``snapshot`` writes exactly this)."""

    name: Text
    level: Literal["node", "graph"]
    spec: dict[str, Any]
    recipe: StoredRecipe
    global_model: dict[str, Tensor]
    client_models: dict[Annotated[int, Field(strict=False)], dict[str, Tensor] | None]
    utility: dict[str, Any]
    ledger: list[dict[str, Any]]
    messages: list[StoredMessage]
    query: StoredQuery
    served: StoredServed | None
    keys: StoredKeys | None
    keys_withheld: bool
    senders: dict[int, list[int]]
    metric_releases: dict[str, Tensor] | None


def manifest_checked(data: Any, path: Path) -> None:
    """The snapshot's structure, one line naming the file and the first field that does not
    fit (its tensors are checked apart, by ``check_tensors``)."""
    checked(Manifest, data, str(path), SnapshotError, "the snapshot")


def plain(value: Any) -> Any:
    """``value`` as weights_only-loadable data (arrays and ciphertexts tagged)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return {"__numpy__": torch.as_tensor(np.ascontiguousarray(value))}
    if isinstance(value, Ciphertext):
        return {"__ciphertext__": list(value.chunks), "size": value.size}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    raise SnapshotError(f"a payload of type {type(value).__name__} cannot be stored")


def unplain(value: Any) -> Any:
    if isinstance(value, dict):
        if "__numpy__" in value:
            return value["__numpy__"].numpy(force=True)
        if "__ciphertext__" in value:
            return Ciphertext(tuple(value["__ciphertext__"]), int(value["size"]))
        return {k: unplain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unplain(v) for v in value]
    return value


# the only types a stored ledger restores into
EVENT_TYPES: dict[str, type] = {
    t.__name__: t
    for t in (
        events.Gaussian,
        events.SubsampledGaussian,
        events.Laplace,
        events.MetricGaussian,
        events.Composed,
        NoGuarantee,
        Caveat,
    )
}


def event_data(event: Any) -> dict[str, Any]:
    """A privacy event as plain data, tagged with its type (compositions recursively)."""
    out: dict[str, Any] = {"type": type(event).__name__}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        if f.name == "events":
            value = [event_data(e) for e in value]
        elif isinstance(value, Scope):
            value = {**dataclasses.asdict(value), "adversaries": list(value.adversaries)}
        out[f.name] = value
    return out


def event_from(data: dict[str, Any]) -> Any:
    kind = data.get("type")
    if kind not in EVENT_TYPES:
        raise SnapshotError(f"ledger: unknown privacy event type {kind!r}")
    fields = {k: v for k, v in data.items() if k != "type"}
    if "events" in fields:
        fields["events"] = tuple(event_from(e) for e in fields["events"])
    try:
        if isinstance(fields.get("scope"), dict):
            scope = fields["scope"]
            fields["scope"] = Scope(**{**scope, "adversaries": tuple(scope["adversaries"])})
        return EVENT_TYPES[kind](**fields)
    except (TypeError, ValueError, KeyError) as e:
        raise SnapshotError(f"ledger: a stored {kind} event does not fit its type ({e})") from e


Weights = Callable[[torch.nn.Module], Any]


def query_data(query: Any, weights: Weights) -> dict[str, Any]:
    """How to rebuild the released query API (its class kept, e.g. CE-FedGNN's encoder)."""
    if isinstance(query, NodeQueryAPI | GraphQueryAPI):
        kind = "node" if isinstance(query, NodeQueryAPI) else "graph"
        return {
            "kind": kind,
            "type": type_ref(type(query)),
            "model": weights(query._model),
        }
    if isinstance(query, TableQueryAPI):
        return {"kind": "table", "type": type_ref(TableQueryAPI), "table": query._logits.clone()}
    if isinstance(query, EmbeddingRelease):
        return {"kind": "table", "type": type_ref(EmbeddingRelease), "table": query._table.clone()}
    if isinstance(query, OwnerRoutedQueryAPI | GraphOwnerRoutedQueryAPI):
        kind = "owner-routed" if isinstance(query, OwnerRoutedQueryAPI) else "graph-owner-routed"
        return {"kind": kind, "owner": torch.as_tensor(query.owner)}
    if isinstance(query, InductiveQueryAPI):
        return {
            "kind": "inductive",
            "mode": query._mode,
            "train": torch.as_tensor(query._train_ids.copy()),
            "model": weights(query._model),
        }
    return {"kind": "unsupported", "type": type(query).__name__}


def subclass(reference: str, *bases: type) -> type:
    """The allow-listed class ``reference`` names (``fgl_workbench.storable``), deriving from one
    of ``bases`` when given; nothing else is looked up, imported or built."""
    try:
        return stored_type(reference, *bases)
    except NotStorableError as exc:
        raise SnapshotError(str(exc)) from None


def spec_data(spec: Any) -> dict[str, Any]:
    """A released architecture (a frozen dataclass, e.g. ``ModelSpec``) as plain data: its
    type and fields, pydantic configs among them dumped and tagged."""
    if not dataclasses.is_dataclass(spec) or isinstance(spec, type):
        raise SnapshotError(f"architecture spec {type(spec).__name__} is not a dataclass")
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, BaseModel):
            value = {"__config__": type_ref(type(value)), "data": value.model_dump()}
        fields[f.name] = plain(value)
    return {"type": type_ref(type(spec)), "fields": fields}


def spec_from(data: dict[str, Any]) -> Any:
    """The architecture a snapshot stored, built only from allow-listed types."""
    cls = subclass(data.get("type"))
    stored = data.get("fields")
    if not isinstance(stored, dict):
        raise SnapshotError(f"{type_ref(cls)}: stored fields are not a mapping")
    fields = {
        k: _built(subclass(v.get("__config__"), BaseModel), v.get("data"))
        if isinstance(v, dict) and "__config__" in v
        else unplain(v)
        for k, v in stored.items()
    }
    return _built(cls, fields)


def fits_weights(spec: Any, state: Any) -> None:
    """The stored architecture has exactly as many weights as stored with it: checked on
    the meta device (nothing allocated) before the model is built, so stored dimensions
    cannot make restoring allocate more than the snapshot holds."""
    if not isinstance(state, dict):
        raise SnapshotError("global_model: stored weights are not a mapping")
    stored = sum(t.numel() for t in state.values() if isinstance(t, torch.Tensor))
    try:
        with torch.device("meta"):
            wanted = sum(t.numel() for t in spec.build().state_dict().values())
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SnapshotError(f"{type_ref(type(spec))}: cannot be built ({exc})") from None
    if wanted != stored:
        raise SnapshotError(
            f"{type_ref(type(spec))}: the stored architecture has {wanted:,} weights, the "
            f"snapshot stores {stored:,}"
        )


def _built(cls: type, fields: Any) -> Any:
    """An allow-listed class built from stored fields; fields that do not fit it are one
    line, not a traceback."""
    if not isinstance(fields, dict):
        raise SnapshotError(f"{type_ref(cls)}: stored fields are not a mapping")
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"{type_ref(cls)}: stored fields do not fit ({exc})") from None


def snapshot(trained: TrainedTarget, keep_secrets: bool = False) -> bytes:
    """The trained target as plain data, serialised; the clients' secret key only with
    ``keep_secrets`` (else the snapshot records that it was withheld)."""
    spec, recipe = trained.spec, trained.recipe

    def weights(module: torch.nn.Module) -> Any:
        """A model's weights; None for the global model, stored once as ``global_model``."""
        return None if module is trained.global_model else plain(module.state_dict())

    data = {
        "format": FORMAT,
        "name": trained.name,
        "level": trained.level,
        "spec": spec_data(spec),
        "recipe": {
            "target": recipe.target,
            "config": plain(recipe.config),
            "num_clients": recipe.num_clients,
            "train_size": recipe.train_size,
            "defenses": [
                {"name": d.name, "params": d.config.model_dump()} for d in recipe.defenses
            ],
        }
        | ({"inductive": True} if recipe.inductive else {}),
        "global_model": plain(trained.global_model.state_dict()),
        "client_models": {int(k): weights(m) for k, m in trained.client_models.items()},
        "utility": dict(trained.utility),
        "ledger": [event_data(e) for e in trained.ledger.events],
        "messages": [
            {
                "round": m.round,
                "sender": m.sender,
                "receiver": m.receiver,
                "kind": m.kind,
                "nbytes": m.nbytes,
                "payload": plain(m.payload),
            }
            for m in trained.transcript.messages
        ],
        "query": query_data(trained.query, weights),
        "served": None if trained.served is None else served_data(trained.served, weights),
        "keys": None if trained.keys is None or not keep_secrets else keys_data(trained.keys),
        "keys_withheld": trained.keys is not None and not keep_secrets,
        "senders": {int(k): list(v) for k, v in trained.senders.items()},
        "metric_releases": None
        if trained.metric_releases is None
        else {f: torch.as_tensor(getattr(trained.metric_releases, f)) for f in RELEASE_FIELDS},
    }
    buffer = io.BytesIO()
    torch.save(data, buffer)
    return buffer.getvalue()


def restore(path: Path, federation: Federation) -> TrainedTarget:
    """A stored trained target, read with ``weights_only=True``, its query API rebuilt on the
    cell's federation; names in it resolve only to registered components."""
    with reading_untrusted(f"the snapshot {path}"):
        return _restored(path, federation)


def stored_sizes(path: Path) -> int:
    """The snapshot's size on disk, once its archive is known to inflate to no more than
    that: ``torch.save`` stores every entry uncompressed, so a compressed entry (a zip bomb)
    or entries larger than the file are refused before anything is read."""
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as z:
            entries = z.infolist()
    except (OSError, ValueError, zipfile.BadZipFile) as exc:  # ValueError: a garbled name
        raise SnapshotError(f"{path}: not a snapshot ({str(exc)[:120]})") from None
    if any(e.compress_type != zipfile.ZIP_STORED for e in entries):
        raise SnapshotError(f"{path}: a compressed entry; snapshots are stored uncompressed")
    if sum(e.file_size for e in entries) > size:
        raise SnapshotError(f"{path}: its entries claim more bytes than the file holds")
    return size


def check_tensors(value: Any, path: Path, budget: int, depth: int = 0) -> int:
    """What ``value``'s tensors occupy, at most ``budget`` bytes (the file's size): each
    tensor dense in its own storage (a stride-0 or overlapping view, which inflates a few
    stored bytes into a large model, is refused), nesting at most ``DEPTH_CAP`` deep."""
    if depth > DEPTH_CAP:
        raise SnapshotError(f"{path}: nested more than {DEPTH_CAP} deep")
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_nested:
            raise SnapshotError(f"{path}: a {value.layout} tensor; only dense ones are stored")
        nbytes = value.numel() * value.element_size()
        if value.dim() > SHAPE_CAP or nbytes > value.untyped_storage().nbytes():
            raise SnapshotError(
                f"{path}: a tensor of shape {tuple(value.shape)} viewing a smaller storage "
                "(stride-0 or overlapping); refused"
            )
        return nbytes
    if isinstance(value, str) and len(value) > TEXT_CAP:
        raise SnapshotError(f"{path}: a string longer than {TEXT_CAP:,} characters")
    children = value.values() if isinstance(value, dict) else value
    if not isinstance(value, dict | list | tuple):
        return 0
    total = 0
    for child in children:
        total += check_tensors(child, path, budget - total, depth + 1)
        if total > budget:
            raise SnapshotError(f"{path}: its tensors hold more bytes than the file stores")
    return total


def _restored(path: Path, federation: Federation) -> TrainedTarget:
    size = stored_sizes(path)
    try:
        # onto the cell's device (``fgl_workbench.device.on_device``), where its models are built
        data = torch.load(path, map_location=torch.get_default_device(), weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "not plain data"
        raise SnapshotError(f"{path}: refused, it holds more than plain data ({first})") from None
    except (RuntimeError, EOFError, ValueError) as exc:
        raise SnapshotError(f"{path}: not a snapshot ({str(exc).strip()[:120]})") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{path}: not a snapshot (expected a mapping)")
    check_tensors(data, path, size)
    if data.get("format") != FORMAT:
        raise SnapshotError(f"{path}: snapshot format {data.get('format')} (expected {FORMAT})")
    manifest_checked(data, path)
    TARGETS.get(data["recipe"]["target"], "snapshot recipe.target")  # loads its plug-in
    spec = spec_from(data["spec"])
    fits_weights(spec, data["global_model"])

    def build(state: Any, field: str) -> torch.nn.Module:
        """The stored architecture with stored weights that must fit it exactly."""
        net = spec.build()
        try:
            net.load_state_dict(state)
        except (RuntimeError, TypeError, AttributeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SnapshotError(
                f"{field}: the stored weights do not fit the model ({first})"
            ) from None
        return net.eval()

    global_model = build(data["global_model"], "global_model")

    def model(state: dict | None, field: str = "query.model") -> torch.nn.Module:
        """The model stored with these weights; the global model itself for None."""
        return global_model if state is None else build(state, field)

    clients = {int(k): model(v, f"client_models.{k}") for k, v in data["client_models"].items()}
    r = data["recipe"]
    recipe = TrainingRecipe(
        r["target"],
        unplain(r["config"]),
        r["num_clients"],
        r["train_size"],
        tuple(applied(d["name"], d["params"]) for d in r["defenses"]),
        bool(r.get("inductive", False)),
    )
    transcript = Transcript.of(
        [
            Message(
                m["round"],
                m["sender"],
                m["receiver"],
                m["kind"],
                m["nbytes"],
                unplain(m["payload"]),
            )
            for m in data["messages"]
        ]
    )
    ledger = PrivacyLedger()
    for e in data["ledger"]:
        ledger = ledger.record(event_from(e))
    return TrainedTarget(
        name=data["name"],
        level=data["level"],
        global_model=global_model,
        client_models=clients,
        spec=spec,
        recipe=recipe,
        query=rebuilt_query(data["query"], model, clients, federation),
        served=None
        if data["served"] is None
        else rebuilt_served(data["served"], model, federation),
        keys=WithheldKey()
        if data.get("keys_withheld")
        else None
        if data["keys"] is None
        else KeyHolder(SecureAggConfig(**data["keys"]["config"]), secret=data["keys"]["secret"]),
        transcript=transcript,
        ledger=ledger,
        utility=data["utility"],
        senders={int(k): tuple(v) for k, v in data["senders"].items()},
        metric_releases=released_from(data.get("metric_releases")),
    )


RELEASE_FIELDS = ("nodes", "counts", "clean", "noisy")


def released_from(raw: Any) -> MetricReleases | None:
    """The evaluator's record of metric-DP releases: four tensors, nothing else."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != set(RELEASE_FIELDS):
        raise SnapshotError(f"metric_releases: expected the fields {', '.join(RELEASE_FIELDS)}")
    if not all(isinstance(raw[f], torch.Tensor) for f in RELEASE_FIELDS):
        raise SnapshotError("metric_releases: every field must be a tensor")
    return MetricReleases(*(raw[f].numpy(force=True) for f in RELEASE_FIELDS))


class WithheldKey:
    """Where the clients' secret key was: the run did not keep it (the default), so anything
    that needs it (a curious client decrypting offline) is not applicable, and says why."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol lookups (copy, pickle) see a plain object
            raise AttributeError(name)
        raise NotApplicableError(
            "the results folder does not keep the clients' CKKS secret key; rerun with "
            "--keep-client-secrets (or keep_client_secrets: true) to attack as a curious "
            "client offline"
        )


def served_data(served: ClientDeployments, weights: Weights) -> dict[str, Any]:
    """The clients' deployments: the model and, per client, its node ids and private edges
    (features are the dataset's, read again at restore)."""
    return {
        "model": weights(served._model),
        "clients": [
            {"ids": torch.as_tensor(ids), "edge_index": d.edge_index} for ids, d in served._clients
        ],
        "num_nodes": served.num_nodes,
    }


def rebuilt_served(s: dict, model, federation: Federation) -> ClientDeployments:
    ds = federation.dataset
    if not isinstance(ds, NodeDataset) or s["num_nodes"] != ds.num_items:
        raise SnapshotError(f"served.num_nodes: expected this node dataset's {ds.num_items}")
    clients = []
    for i, c in enumerate(s["clients"]):
        ids = _node_ids(c["ids"], ds.num_items, f"served.clients.{i}.ids")
        edges = _node_ids(c["edge_index"].reshape(-1), len(ids), f"served.clients.{i}.edge_index")
        if c["edge_index"].dim() != 2 or c["edge_index"].shape[0] != 2:
            raise SnapshotError(f"served.clients.{i}.edge_index: expected 2 rows of local ids")
        clients.append((ids, Data(x=ds.data.x[ids], edge_index=torch.as_tensor(edges).view(2, -1))))
    return ClientDeployments(model(s["model"], "served.model"), clients, s["num_nodes"])


def keys_data(keys: Any) -> dict[str, Any]:
    if not isinstance(keys, KeyHolder):
        raise SnapshotError(f"key material of type {type(keys).__name__} cannot be stored")
    return {"config": keys.cfg.model_dump(), "secret": keys.secret_context()}


def rebuilt_query(q: dict, model, clients: dict, federation: Federation) -> Any:
    ds = federation.dataset
    if q["kind"] == "node" and isinstance(ds, NodeDataset):
        return subclass(q["type"], NodeQueryAPI)(model(q["model"]), ds.data)
    if q["kind"] == "graph":
        return GraphQueryAPI(model(q["model"]))
    if q["kind"] == "table":
        return subclass(q["type"], TableQueryAPI, EmbeddingRelease)(q["table"])
    if q["kind"] == "inductive" and isinstance(ds, NodeDataset):
        train = _node_ids(q.get("train"), ds.num_items, "query.train")
        if q.get("mode") not in ("tstf", "tsts"):
            raise SnapshotError(f"query.mode: expected 'tstf' or 'tsts', got {q.get('mode')!r}")
        return InductiveQueryAPI(model(q.get("model")), ds.data, train, q["mode"])
    if q["kind"] == "owner-routed" and isinstance(ds, NodeDataset):
        return OwnerRoutedQueryAPI(clients, ds.data, _owner(q.get("owner"), ds.num_items, clients))
    if q["kind"] == "graph-owner-routed" and isinstance(ds, GraphDataset):
        owner = _owner(q.get("owner"), ds.num_items, clients)
        return GraphOwnerRoutedQueryAPI(clients, owner, ds.graphs)
    return UnavailableQuery(q.get("type", q["kind"]))


def _node_ids(value: Any, num_nodes: int, field: str) -> np.ndarray:
    """Stored node ids, checked: a 1-D integer tensor of ids of this dataset's nodes."""
    ok = isinstance(value, torch.Tensor) and value.dim() == 1
    ok = ok and value.dtype in (torch.int32, torch.int64)
    ids = value.numpy(force=True).astype(np.int64) if ok else np.zeros(0, dtype=np.int64)
    if not ok or (ids.size and (ids.min() < 0 or ids.max() >= num_nodes)):
        raise SnapshotError(f"{field}: expected a 1-D integer tensor of node ids < {num_nodes}")
    return ids


def _owner(value: Any, num_items: int, clients: dict) -> np.ndarray:
    """A stored owner table, checked: one entry per item, each a stored client or −1."""
    ok = isinstance(value, torch.Tensor) and value.shape == (num_items,)
    ok = ok and value.dtype in (torch.int32, torch.int64)
    owner = value.numpy(force=True).astype(np.int64) if ok else np.zeros(0, dtype=np.int64)
    if not ok or not clients or not np.isin(owner, [-1, *clients]).all():
        raise SnapshotError(
            f"query.owner: expected a 1-D integer tensor of {num_items} ids of the stored "
            "client models (or -1), and at least one client model"
        )
    return owner


class UnavailableQuery:
    """Stands in for a released query API a snapshot does not keep: attacks that query it
    report "not applicable"; attacks on what the server or a client received still run."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __getattr__(self, name: str) -> Any:
        raise NotApplicableError(f"offline: the released query API ({self.kind}) is not stored")
