"""``audit_uploads``: the audit of a federation trained elsewhere, from what its server
logged: each client's upload in each round, and the global models it sent. The uploads become
the workbench's own server view (``fgl_workbench.adversary.threat.ServerView``: the messages
the honest-but-curious server received, and the global models it sent), so its server-side
attacks run on them as on a federation the workbench trained: membership (each client's
records scored by the model that client uploaded last, and every record by the most
suspicious upload), each client's label distribution, and a client's training data
(gradient inversion). Who trained on what, their labels and features stay with the scorer."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import nn
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge, ClientShape, ServerView
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.metrics import distribution_metrics, value_fractions
from fgl_workbench.attacks.reconstruction.family import client_data_metrics
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.external.folder import (
    audited_cell,
    communication,
    results_folder,
)
from fgl_workbench.external.inference import InferenceAudit, mean_interval, rate_interval
from fgl_workbench.external.model import (
    ExternalSpec,
    ModelAudit,
    attack_configs,
    check_run,
    factory_of,
    ran,
    record_ids,
    record_labels,
    records_level,
)
from fgl_workbench.external.scores import DELTA, ScoreAudit, audit_scores
from fgl_workbench.running.suite import AttackEntry
from fgl_workbench.seeding import seed_everything
from fgl_workbench.storage.store import CellRow, attack_label
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.transcript import MODEL_WEIGHTS, SERVER, Message, client

DEFAULT_ATTACKS = ({"name": "mia-threshold", "params": {"signal": "loss", "adversary": "server"}},)
# added to the defaults at node level when the global models were logged; gradient inversion
# (minutes per client) runs only when asked
UPLOAD_DEFAULTS = ({"name": "label-distribution"},)
FAMILIES = ("membership", "distribution", "client-data")
State = Mapping[str, torch.Tensor]
# (the global model a client was sent, its graph, its training mask, seed) -> the model after
# the client's local round
LocalFn = Callable[[nn.Module, Data, torch.Tensor, int], nn.Module]


@dataclass(frozen=True)
class ExternalRecipe(TrainingRecipe):
    """A federation trained elsewhere: a client's local round is the user's ``local_fn``
    where given, else the step ``config`` describes (``recipe=``), else unknown, and an attack
    that must simulate one does not apply."""

    local_fn: LocalFn | None = None

    def local_round(self, model: nn.Module, data: Data, seed: int) -> nn.Module:
        if self.local_fn is None:
            if not self.config:
                raise NotApplicableError(
                    "it simulates the clients' local round: pass local_fn= (or recipe=)"
                )
            return super().local_round(model, data, seed)
        seed_everything(seed)
        graph = Data(x=data.x, edge_index=data.edge_index, y=data.y)
        out = self.local_fn(model, graph, data.train_mask, seed)
        if not isinstance(out, nn.Module):
            raise ConfigError(
                "local_fn: expected it to return the locally trained torch module "
                f"(got {type(out).__name__})"
            )
        return out.cpu()


@dataclass(frozen=True)
class _Logged:
    """The federation as the server holds it (``view``; ``knowledge``: the membership
    adversary's, every record's features and edges; ``pool``: the other attacks', only the
    records no client holds) and, for the scorer only, who holds what: ``owned[k]``, client
    k's (members, non-members); ``ids`` asked about, ``truth`` (a member?) and ``owner``."""

    view: ServerView
    knowledge: BackgroundKnowledge
    pool: BackgroundKnowledge
    candidates: Candidates
    owned: dict[int, tuple[np.ndarray, np.ndarray]]
    labels: np.ndarray
    features: torch.Tensor | None
    ids: np.ndarray
    truth: np.ndarray
    owner: np.ndarray


def audit_uploads(
    rounds: Sequence[Mapping[int, State]],
    model: nn.Module,
    data: Data | Sequence[Data],
    members: Mapping[int, Sequence[int] | np.ndarray],
    *,
    nonmembers: Mapping[int, Sequence[int] | np.ndarray] | None = None,
    global_models: Sequence[State] | None = None,
    updates: bool = False,
    local_fn: LocalFn | None = None,
    recipe: Mapping[str, Any] | None = None,
    attacks: Sequence[dict[str, Any]] | None = None,
    model_factory: Callable[[], nn.Module] | None = None,
    seed: int = 0,
    delta: float = DELTA,
    name: str = "the federation",
    out: str | Path | None = None,
) -> ModelAudit:
    """``rounds[r][k]``: what client ``k`` uploaded in round ``r`` (a state dict of ``model``'s
    architecture, or with ``updates`` its change from ``global_models[r]``, the model the
    server sent that round, one for each round). ``data``: the records (one graph at node
    level, a list of graphs at graph level) and ``members[k]`` the ids client ``k`` trained
    on; ``nonmembers[k]`` the ones it held without training on (default: as many as its
    members, drawn from records no client trained on). The records no client holds are the
    server's auxiliary pool: all the attacks besides membership know of the records.

    ``attacks``: server-side attacks of the membership, distribution and client-data
    families. Default: the loss threshold on each upload and, at node level with
    ``global_models``, ``label-distribution``; ``gradient-inversion`` (``params.client``: whose
    upload; minutes each) only when asked, as it needs ``global_models`` and ``recipe``.
    ``local_fn(model, data, mask, seed)``: the clients' local round, returning ``model`` (the
    global model) trained as a client trains it for one round on ``data``'s ``mask`` nodes;
    label-distribution fits its reading of the uploads on simulated rounds, so without it (or
    ``recipe``) it does not apply: a default recipe unlike the clients' moves the output layer
    by other amounts, and the fractions read would measure the mismatch, not the leak.
    ``recipe``: the local round as numbers (``optimizer`` ``"adam"`` or ``"sgd"``, ``lr``,
    ``local_epochs``, ``weight_decay``, each step full batch from a fresh optimizer), what
    gradient inversion replays differentiably (``local_fn`` cannot be differentiated
    through). ``model_factory`` as ``audit_model``'s.

    Returns, per membership attack, the audit of every record scored by its most suspicious
    upload, and of each client's records scored by that client's own upload (grouped by
    client); per other attack an ``InferenceAudit`` in ``inferences``. ``out``: a results
    folder the audit is also written to, as ``audit_model``'s (its utility: ``model``'s
    accuracy on the non-members, so pass the federation's final model there); its
    attacks train no reference models, so a re-run runs them all again."""
    level = records_level(data, None)
    check_run(name, seed)
    labels = record_labels(data, level)
    rng = np.random.default_rng(seed)
    owned = _owned(members, nonmembers, labels.size, rng)
    received = _received(rounds, global_models, updates, model.state_dict().keys())
    silent = set(owned) - {int(m.sender.split(":")[1]) for m in received}
    if silent:
        raise ConfigError(f"rounds: client {min(silent)} has members but uploaded nothing")
    if local_fn is not None and not callable(local_fn):
        raise ConfigError("local_fn: expected a function (model, data, mask, seed) -> model")
    steps = _recipe(recipe)
    entries = list(attacks) if attacks is not None else list(DEFAULT_ATTACKS)
    if attacks is None and level == "node" and global_models is not None:
        entries += UPLOAD_DEFAULTS
    configs = attack_configs(entries, "server", FAMILIES)
    for i, (attack, config) in enumerate(configs):
        if ATTACKS.get(attack).family == "client-data" and config.client not in owned:
            raise ConfigError(
                f"attacks[{i}].params.client: expected a client that trained "
                f"(one of {sorted(owned)})"
            )
    spec = ExternalSpec(factory_of(model, model_factory), int(labels.max()) + 1, level)
    train_size = sum(m.size for m, _ in owned.values())
    known = ExternalRecipe("external", steps, len(owned), train_size, local_fn=local_fn)
    logged = _logged(data, level, labels, owned, received, global_models, spec, known, rng)
    results: dict[str, ScoreAudit] = {}
    inferences: dict[str, InferenceAudit] = {}
    skipped: dict[str, str] = {}
    with results_folder(out, name, delta) as folder:
        if folder is not None:
            folder.open(_cell(name, model, data, logged, rounds, global_models, local_fn, seed))
        for (attack, config), raw in zip(configs, entries, strict=True):
            entry = AttackEntry(name=attack, params=dict(raw.get("params", {})))
            label = attack_label(entry.name, entry.params)
            family = ATTACKS.get(attack).family
            title = f"{name}: {label}"
            start = time.perf_counter()
            if family == "membership":
                got: Any = _membership(attack, config, logged, seed, delta, title)
            elif family == "distribution":
                got = _distribution(attack, config, logged, seed, title)
            else:
                got = _client_data(attack, config, logged, seed, title)
            seconds = time.perf_counter() - start
            if isinstance(got, str):
                skipped[label] = got
            elif isinstance(got, InferenceAudit):
                inferences[label] = got
            else:
                results.update({label + suffix: a for suffix, a in got.items()})
            for suffix, result in got.items() if isinstance(got, dict) else [("", got)]:
                if folder is not None:
                    folder.put(_scored_by(entry, suffix), result, seconds)
    return ModelAudit(name, results, (), skipped, inferences)


def _scored_by(entry: AttackEntry, suffix: str) -> AttackEntry:
    """The row of a membership attack's second reading (each client's records by its own
    upload) is the attack's own, its parameters marked with the reading."""
    if not suffix:
        return entry
    return AttackEntry(name=entry.name, params=entry.params | {"scored_by": suffix.strip(", ")})


def _cell(
    name: str,
    model: nn.Module,
    data: Any,
    logged: _Logged,
    rounds: Sequence[Mapping[int, State]],
    global_models: Sequence[State] | None,
    local_fn: LocalFn | None,
    seed: int,
) -> CellRow:
    """The logged federation as a results folder's cell: named by its final model and every
    upload, its communication what the server logged (uploads up, global models down)."""
    received = logged.view.received
    sent = sum(
        sum(t.numel() * t.element_size() for t in g.values()) * len(logged.owned)
        for g in global_models or ()
    )
    logs = {f"{m.round}.{m.sender}.{k}": t for m in received for k, t in (m.payload or {}).items()}
    return audited_cell(
        name=name,
        model=model,
        data=data,
        owned=logged.owned,
        aux_ids=logged.knowledge.aux_ids,
        train_fn=local_fn,
        seed=seed,
        logged=logs,
        comm=communication(
            len(rounds),
            len(received) + len(global_models or ()) * len(logged.owned),
            sum(m.nbytes for m in received),
            sent,
        ),
    )


def _logged(
    data: Any,
    level: str,
    labels: np.ndarray,
    owned: dict[int, tuple[np.ndarray, np.ndarray]],
    received: tuple[Message, ...],
    global_models: Sequence[State] | None,
    spec: ExternalSpec,
    recipe: ExternalRecipe,
    rng: np.random.Generator,
) -> _Logged:
    """The server's view and knowledge of the logged federation, and the membership
    challenge (every client's members and non-members, in an order that tells nothing)."""
    n = labels.size
    ids = np.concatenate([m for m, _ in owned.values()] + [o for _, o in owned.values()])
    truth = np.concatenate(
        [np.ones(m.size, bool) for m, _ in owned.values()]
        + [np.zeros(o.size, bool) for _, o in owned.values()]
    )
    owner = np.concatenate(
        [np.full(m.size, k) for k, (m, _) in owned.items()]
        + [np.full(o.size, k) for k, (_, o) in owned.items()]
    )
    order = rng.permutation(ids.size)  # position tells nothing
    ids, truth, owner = ids[order], truth[order], owner[order]
    taken = np.zeros(n, bool)
    taken[ids] = True
    aux_ids = np.flatnonzero(~taken)
    if level == "node":
        known = Data(x=data.x, edge_index=data.edge_index, num_nodes=n)
        candidates = Candidates("node", ids, labels[ids])
        aux_graphs: tuple[Data, ...] = ()
        pool_graph: Data | None = _pool_graph(data, aux_ids)
    else:
        known, pool_graph, graphs = None, None, list(data)
        candidates = Candidates("graph", ids, labels[ids], tuple(graphs[i] for i in ids))
        aux_graphs = tuple(graphs[i] for i in aux_ids)
    knowledge = BackgroundKnowledge(
        level, aux_ids, labels[aux_ids], aux_graphs, known, spec, recipe
    )
    sent = tuple(
        Message(r, SERVER, client(k), MODEL_WEIGHTS, 0, dict(g))
        for r, g in enumerate(global_models or ())
        for k in owned
    )
    view = ServerView(level, spec.num_classes, len(owned), received, spec, sent)
    features = data.x if level == "node" else None
    return _Logged(
        view,
        knowledge,
        replace(knowledge, graph=pool_graph),
        candidates,
        owned,
        labels,
        features,
        ids,
        truth,
        owner,
    )


def _pool_graph(data: Data, aux_ids: np.ndarray) -> Data:
    """The population graph as far as the server's own pool goes: the pool's features and
    the edges among its nodes; every node a client holds blank and unlinked."""
    aux = torch.as_tensor(aux_ids)
    x = torch.zeros_like(data.x)
    x[aux] = data.x[aux]
    edge_index, _ = subgraph(aux, data.edge_index, num_nodes=x.shape[0])
    return Data(x=x, edge_index=edge_index, num_nodes=x.shape[0])


def _membership(
    attack: str, config: Any, logged: _Logged, seed: int, delta: float, title: str
) -> dict[str, ScoreAudit] | str:
    """Every record scored by its most suspicious upload (under ``""``) and, where the
    attack scores each upload, each client's records by its own."""
    inp = AttackInput(logged.view, logged.knowledge, logged.candidates)
    out = ran(attack, config, inp, seed)
    if isinstance(out, str):
        return out
    ids, truth, owner = logged.ids, logged.truth, logged.owner
    audits = {"": audit_scores(out.scores, truth, ids=ids, delta=delta, name=title)}
    per_model = out.details.get("per_model")
    if per_model:  # each record scored by its own client's upload
        own = np.array([per_model[client(k)][i] for i, k in enumerate(owner.tolist())])
        audits[", each client's own upload"] = audit_scores(
            own,
            truth,
            ids=ids,
            groups=np.array([f"client {k}" for k in owner]),
            delta=delta,
            name=f"{title}, each client's upload on its own records",
        )
    return audits


def _distribution(
    attack: str, config: Any, logged: _Logged, seed: int, title: str
) -> InferenceAudit | str:
    """Each client's inferred label fractions against its members' (``distribution_metrics``
    beside the pool's prior), the mean TV distance with its t-interval over clients and the
    dominant class's accuracy with its exact one."""
    if logged.pool.aux_ids.size == 0:
        return (
            "the server holds no records (every record is a client's member or non-member), "
            "and label-distribution simulates its rounds on records the server holds"
        )
    clients = np.array(sorted(logged.owned))
    out = ran(attack, config, AttackInput(logged.view, logged.pool, clients), seed)
    if isinstance(out, str):
        return out
    c = logged.view.num_classes
    truth = np.stack([value_fractions(logged.labels[logged.owned[k][0]], c) for k in clients])
    metrics = distribution_metrics(out.scores, truth, value_fractions(logged.pool.aux_labels, c))
    tv = 0.5 * np.abs(out.scores - truth).sum(1)
    mean_interval(metrics, "tv_mean", tv, (0.0, 1.0))
    rate_interval(metrics, "dominant_accuracy", clients.size)
    shown = (("tv_mean", "tv_baseline"), ("dominant_accuracy", "dominant_baseline"))
    asked = f"{clients.size} client" + ("s" if clients.size != 1 else "")
    return InferenceAudit(title, "distribution", metrics, shown, asked)


def _client_data(
    attack: str, config: Any, logged: _Logged, seed: int, title: str
) -> InferenceAudit | str:
    """Client ``config.client``'s training rows reconstructed from its upload, scored against
    its members' features and labels beside the pool's priors; the label accuracy with its
    exact interval over the rows. The server knows the client's node counts, never its
    edges (a federation trained elsewhere logs none)."""
    if logged.features is None:
        return "it reconstructs a client's nodes: needs node-level data"
    if getattr(config, "structure", "none") == "known":
        return "the server of a federation trained elsewhere knows no client's edges"
    if not logged.pool.recipe.config:
        return "it replays the clients' local round differentiably: pass recipe="
    members, held = logged.owned[config.client]
    shape = ClientShape(members.size + held.size, members.size)
    knowledge = replace(logged.pool, client_shape=shape)
    out = ran(attack, config, AttackInput(logged.view, knowledge, np.array([config.client])), seed)
    if isinstance(out, str):
        return out
    c = logged.view.num_classes
    prior_x = knowledge.aux_features().numpy(force=True).mean(0)
    prior_y = value_fractions(knowledge.aux_labels, c)
    features = logged.features[torch.as_tensor(members)].numpy(force=True)
    metrics = client_data_metrics(out, features, logged.labels[members], prior_x, prior_y)
    rate_interval(metrics, "label_accuracy", members.size)
    shown = (
        ("cosine", "cosine_baseline"),
        ("feature_auc", "feature_auc_baseline"),
        ("label_accuracy", "label_accuracy_baseline"),
        ("label_set_accuracy", None),
    )
    count = f"{members.size} training nodes of client {config.client}"
    return InferenceAudit(title, "client-data", metrics, shown, count)


class LocalRound(BaseModel):
    """``recipe=``: the clients' local round, each step full batch from a fresh optimizer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    optimizer: Literal["adam", "sgd"]
    lr: float = Field(gt=0.0)
    local_epochs: int = Field(ge=1)
    weight_decay: float = Field(0.0, ge=0.0)


def _recipe(recipe: Mapping[str, Any] | None) -> dict[str, Any]:
    """The clients' local round as numbers, checked; empty where none was given."""
    if recipe is None:
        return {}
    if not isinstance(recipe, Mapping):
        raise ConfigError("recipe: expected a mapping (optimizer, lr, local_epochs, weight_decay)")
    try:
        return LocalRound(**recipe).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"recipe.{where}: {first['msg']}") from None


def _owned(
    members: Mapping[int, Any],
    nonmembers: Mapping[int, Any] | None,
    n: int,
    rng: np.random.Generator,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each client's (members, non-members), checked disjoint across all clients."""
    if not isinstance(members, Mapping) or not members:
        raise ConfigError("members: expected a mapping of client id → the ids it trained on")
    mine = {_client(k, "members"): record_ids(v, n, f"members[{k}]") for k, v in members.items()}
    if nonmembers is not None:
        if not isinstance(nonmembers, Mapping):
            raise ConfigError("nonmembers: expected a mapping of client id → ids it held")
        nonmembers = {_client(k, "nonmembers"): v for k, v in nonmembers.items()}
    taken = np.zeros(n, bool)
    for k, m in mine.items():
        if taken[m].any():
            raise ConfigError(f"members[{k}]: expected records no other client trained on")
        taken[m] = True
    out = {}
    for k, m in mine.items():
        if nonmembers is None:
            rest = np.flatnonzero(~taken)
            if not rest.size:
                raise ConfigError(
                    f"nonmembers: no record is left to ask client {k} about; pass nonmembers="
                )
            o = np.sort(rng.choice(rest, min(m.size, rest.size), replace=False))
        elif k not in nonmembers:
            raise ConfigError(f"nonmembers: expected an entry for client {k}")
        else:
            o = record_ids(nonmembers[k], n, f"nonmembers[{k}]")
            if taken[o].any():
                raise ConfigError(f"nonmembers[{k}]: expected records no client trained on")
        taken[o] = True
        out[k] = (m, o)
    return out


def _client(key: Any, field: str) -> int:
    """A client id as the transcript names it: a whole number (``0`` or ``"0"``)."""
    try:
        return int(key)
    except (TypeError, ValueError):
        raise ConfigError(f"{field}: expected whole-number client ids (got {key!r})") from None


def _received(
    rounds: Sequence[Mapping[int, State]],
    global_models: Sequence[State] | None,
    updates: bool,
    names: Any,
) -> tuple[Message, ...]:
    """The server's received messages: one model-weights upload per client and round, each
    holding exactly the model's state-dict ``names``."""
    if not rounds:
        raise ConfigError("rounds: expected at least one round of uploads")
    if updates and global_models is None:
        raise ConfigError("global_models: updates need the model the server sent each round")
    if global_models is not None and len(global_models) < len(rounds):
        raise ConfigError(
            f"global_models: expected the model the server sent in each of the {len(rounds)} "
            f"rounds (got {len(global_models)})"
        )
    for r, g in enumerate(global_models or ()):
        if not isinstance(g, Mapping) or g.keys() != names:
            raise ConfigError(f"global_models[{r}]: expected a state dict of model's keys")
    messages = []
    for r, uploads in enumerate(rounds):
        if not isinstance(uploads, Mapping):
            raise ConfigError(f"rounds[{r}]: expected a mapping of client id → its upload")
        for k, state in sorted(uploads.items()):
            if not isinstance(state, Mapping) or not all(
                isinstance(t, torch.Tensor) for t in state.values()
            ):
                raise ConfigError(f"rounds[{r}][{k}]: expected a state dict of tensors")
            if state.keys() != names:
                raise ConfigError(f"rounds[{r}][{k}]: expected exactly model's state-dict keys")
            weights = dict(state)
            if updates:
                base = global_models[r]  # type: ignore[index]
                weights = {name: base[name] + t for name, t in state.items()}
            nbytes = sum(t.numel() * t.element_size() for t in weights.values())
            messages.append(
                Message(r, client(_client(k, "rounds")), SERVER, MODEL_WEIGHTS, nbytes, weights)
            )
    return tuple(messages)
