"""``audit_uploads``: the membership audit of a federation trained elsewhere, from what its
server logged: each client's upload in each round. The uploads become the workbench's own
server view (``fgl_workbench.adversary.threat.ServerView``: the messages the honest-but-curious
server received, and the global models it sent), so its server-side attacks run on them as on
a federation the workbench trained; each client's records are scored by the model that client
uploaded last, and every record by the most suspicious upload."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge, ServerView
from fgl_workbench.attacks import AttackInput
from fgl_workbench.errors import ConfigError
from fgl_workbench.external.model import (
    ExternalSpec,
    ModelAudit,
    attack_configs,
    factory_of,
    ran,
    record_ids,
    record_labels,
    records_level,
)
from fgl_workbench.external.scores import DELTA, audit_scores
from fgl_workbench.storage.store import attack_label
from fgl_workbench.targets.training import TrainingRecipe
from fgl_workbench.transcript import MODEL_WEIGHTS, SERVER, Message, client

DEFAULT_ATTACKS = ({"name": "mia-threshold", "params": {"signal": "loss", "adversary": "server"}},)
State = Mapping[str, torch.Tensor]


def audit_uploads(
    rounds: Sequence[Mapping[int, State]],
    model: nn.Module,
    data: Data | Sequence[Data],
    members: Mapping[int, Sequence[int] | np.ndarray],
    *,
    nonmembers: Mapping[int, Sequence[int] | np.ndarray] | None = None,
    global_models: Sequence[State] | None = None,
    updates: bool = False,
    attacks: Sequence[dict[str, Any]] | None = None,
    model_factory: Callable[[], nn.Module] | None = None,
    seed: int = 0,
    delta: float = DELTA,
    name: str = "the federation",
) -> ModelAudit:
    """``rounds[r][k]``: what client ``k`` uploaded in round ``r`` (a state dict of ``model``'s
    architecture, or with ``updates`` its change from ``global_models[r]``, the model the
    server sent that round). ``data``: the records (one graph at node level, a list of graphs
    at graph level) and ``members[k]`` the ids client ``k`` trained on; ``nonmembers[k]`` the
    ones it held without training on (default: as many as its members, drawn from records
    no client trained on). ``attacks``: server-side membership attacks (default: the loss
    threshold on each upload); ``model_factory`` as ``audit_model``'s. Returns, per attack,
    the audit of every record scored by its most suspicious upload, and of each client's
    records scored by that client's own upload (grouped by client)."""
    level = records_level(data, None)
    labels = record_labels(data, level)
    n = labels.size
    rng = np.random.default_rng(seed)
    owned = _owned(members, nonmembers, n, rng)
    received = _received(rounds, global_models, updates, model.state_dict().keys())
    silent = set(owned) - {int(m.sender.split(":")[1]) for m in received}
    if silent:
        raise ConfigError(f"rounds: client {min(silent)} has members but uploaded nothing")
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
    spec = ExternalSpec(factory_of(model, model_factory), int(labels.max()) + 1, level)
    recipe = TrainingRecipe("external", {}, len(owned), int(truth.sum()))
    if level == "node":
        known = Data(x=data.x, edge_index=data.edge_index, num_nodes=n)
        candidates = Candidates("node", ids, labels[ids])
        aux_graphs: tuple[Data, ...] = ()
    else:
        known, graphs = None, list(data)
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
    results, skipped = {}, {}
    entries = list(attacks) if attacks is not None else list(DEFAULT_ATTACKS)
    for (attack, config), raw in zip(attack_configs(entries, "server"), entries, strict=True):
        label = attack_label(attack, dict(raw.get("params", {})))
        out = ran(attack, config, AttackInput(view, knowledge, candidates), seed)
        if isinstance(out, str):
            skipped[label] = out
            continue
        results[label] = audit_scores(
            out.scores, truth, ids=ids, delta=delta, name=f"{name}: {label}"
        )
        per_model = out.details.get("per_model")
        if per_model:  # each record scored by its own client's upload
            own = np.array([per_model[client(k)][i] for i, k in enumerate(owner.tolist())])
            results[f"{label}, each client's own upload"] = audit_scores(
                own,
                truth,
                ids=ids,
                groups=np.array([f"client {k}" for k in owner]),
                delta=delta,
                name=f"{name}: {label}, each client's upload on its own records",
            )
    return ModelAudit(name, results, (), skipped)


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
    if updates and (global_models is None or len(global_models) < len(rounds)):
        raise ConfigError("global_models: updates need the model the server sent each round")
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
