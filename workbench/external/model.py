"""``audit_model``: the privacy audit of a GNN a user trained themselves, with the workbench's
own attacks. The model answers as the workbench's own deployments do (node level:
``fgl_workbench.query.NodeQueryAPI``, each query on its own k-hop subgraph; graph level:
``GraphQueryAPI``), the querier knows the candidates' labels and, at node level, the graph's
features and edges (not who trained), and LiRA's and RMIA's reference models are trained by the
user's own ``train_fn`` on the adversary's records, so the recipe they replay is the one the
user ran. At node level link stealing and attribute inference are asked too, as the workbench
asks them of its own targets (``fgl_workbench.external.structure``)."""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.accountants import AdversaryEpsilon
from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge, QuerierView
from fgl_workbench.attacks import ATTACKS, AttackInput, AttackOutput
from fgl_workbench.attacks.membership.reference import ReferencePool, TrainJob
from fgl_workbench.data.datasets import Dataset
from fgl_workbench.data.federation import NodeClient, build_federation
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.external.folder import audited_cell, results_folder
from fgl_workbench.external.inference import InferenceAudit
from fgl_workbench.external.privacy import epsilon_lines, opacus_defense, opacus_epsilons
from fgl_workbench.external.scores import (
    DELTA,
    MEMBERSHIP,
    ScoreAudit,
    audit_scores,
    interval_text,
    number_text,
)
from fgl_workbench.external.structure import UserGraph, structure_input, user_graph
from fgl_workbench.query import GraphQueryAPI, NodeQueryAPI, observed
from fgl_workbench.registry import BUILT_IN
from fgl_workbench.running.suite import AttackEntry
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.storage.store import attack_label
from fgl_workbench.targets.training import (
    TrainingRecipe,
    train_graph_epochs,
    train_node_epochs,
)

if TYPE_CHECKING:
    import pandas

# (model_factory, the graph or list of graphs, training mask, seed) -> the trained model
TrainFn = Callable[[Callable[[], nn.Module], Any, torch.Tensor, int], nn.Module]
DEFAULT_ATTACKS = (
    {"name": "mia-threshold", "params": {"signal": "loss"}},
    {"name": "mia-rmia"},
    {"name": "mia-lira"},
)
# at node level also the graph's edges and the nodes' labels: He et al.'s unsupervised link
# stealing (correlation of posteriors) and attribute inference of the label
NODE_ATTACKS = (*DEFAULT_ATTACKS, {"name": "link-stealing"}, {"name": "attribute-inference"})
FAMILIES = ("membership", "link", "attribute")
# Kipf & Welling's schedule: what the recipe is assumed to be when the user gives none
DEFAULT_RECIPE = {"epochs": 200, "lr": 0.01, "weight_decay": 5e-4}


@dataclass(frozen=True)
class ExternalSpec:
    """What the reference pool needs of the released architecture: a fresh, untrained copy
    (``fresh_copy`` of the user's model) and its class count."""

    factory: Callable[[], nn.Module]
    num_classes: int
    level: str = "node"

    def build(self) -> nn.Module:
        return self.factory()


class ExternalPool(ReferencePool):
    """Reference models trained by the user's ``train_fn`` (in this process: a user's
    function need not pickle), each on the graph the adversary's records induce with its
    inclusion row as the training mask, as one client holding them all."""

    def __init__(self, train_fn: TrainFn, seed: int) -> None:
        super().__init__(jobs=1, seed=seed, batched=False)
        self.train_fn = train_fn

    @staticmethod
    def _shards(dataset: Dataset, num_clients: int, seed: int) -> list[np.ndarray]:
        return [np.arange(dataset.num_items)]

    def _run(
        self, jobs: list[TrainJob], dataset: Dataset, spec: Any
    ) -> list[dict[str, torch.Tensor]]:
        states = []
        for job in jobs:
            client = build_federation(dataset, job.partition).clients[0]
            if isinstance(client, NodeClient):
                d = client.data
                data: Data | list[Data] = Data(x=d.x, edge_index=d.edge_index, y=d.y)
                mask = d.train_mask
            else:  # the member graphs first, then the others the client holds
                data = list(client.train) + list(client.test)
                mask = torch.arange(len(data)) < len(client.train)
            model = trained(self.train_fn, spec.factory, data, mask, job.seed)
            states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return states


def trained(
    train_fn: TrainFn, factory: Callable[[], nn.Module], data: Any, mask: torch.Tensor, seed: int
) -> nn.Module:
    seed_everything(seed)
    model = train_fn(factory, data, mask, seed)
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"train_fn: expected it to return the trained torch module (got {type(model).__name__})"
        )
    return model.eval()


def default_training(
    factory: Callable[[], nn.Module], data: Data | list[Data], mask: torch.Tensor, seed: int
) -> nn.Module:
    """The workbench's own training loops with ``DEFAULT_RECIPE`` (Adam): full batch on a
    graph's masked nodes, mini-batches of 32 of the masked graphs at graph level."""
    model = factory()
    opt = torch.optim.Adam(
        model.parameters(), lr=DEFAULT_RECIPE["lr"], weight_decay=DEFAULT_RECIPE["weight_decay"]
    )
    epochs = int(DEFAULT_RECIPE["epochs"])
    if isinstance(data, Data):
        masked = Data(x=data.x, edge_index=data.edge_index, y=data.y, train_mask=mask)
        train_node_epochs(model, masked, opt, epochs)
    else:
        graphs = [g for g, kept in zip(data, mask.tolist(), strict=True) if kept]
        train_graph_epochs(model, graphs, opt, epochs, 32, torch.Generator().manual_seed(seed))
    return model


def fresh_copy(model: nn.Module) -> Callable[[], nn.Module]:
    """A factory of untrained copies of ``model``'s architecture: a deep copy whose every
    module with ``reset_parameters`` (PyG's and torch's layers) is re-initialised. A parameter
    no such module holds (a bare ``nn.Parameter``) would keep its trained value, and reference
    models would start from the target: refused, naming it, so the user passes a factory."""
    if callable(getattr(model, "reset_parameters", None)):
        kept: list[str] = []
    else:
        kept = [
            f"{where}.{name}" if where else name
            for where, m in model.named_modules()
            if not callable(getattr(m, "reset_parameters", None))
            for name, _ in m.named_parameters(recurse=False)
        ]
    if kept:
        raise ConfigError(
            f"model: no reset_parameters() re-initialises {', '.join(kept[:5])}; pass "
            "model_factory= (a function returning a fresh, untrained model), else reference "
            "models would start from the trained weights"
        )
    template = copy.deepcopy(model).cpu()

    def build() -> nn.Module:
        fresh = copy.deepcopy(template)
        for m in fresh.modules():
            if callable(getattr(m, "reset_parameters", None)):
                m.reset_parameters()
        return fresh

    return build


def factory_of(
    model: nn.Module, model_factory: Callable[[], nn.Module] | None
) -> Callable[[], nn.Module]:
    """The user's factory where given (checked to build the model's architecture), else
    ``fresh_copy``."""
    if model_factory is None:
        return fresh_copy(model)
    built = model_factory()
    if not isinstance(built, nn.Module) or built.state_dict().keys() != model.state_dict().keys():
        raise ConfigError(
            "model_factory: expected it to build a fresh model of model's architecture"
        )
    return model_factory


@dataclass(frozen=True)
class ModelAudit:
    """Every attack against one model, by the attack's label: ``attacks``, those that ask a
    yes/no question of each candidate (a member? an edge?) as ``ScoreAudit``; ``inferences``,
    those that infer a value (an attribute, a label distribution) as ``InferenceAudit``."""

    name: str
    attacks: dict[str, ScoreAudit]
    # the ε the user's DP training claims (``privacy=``), per unit, against a querier
    epsilons: tuple[AdversaryEpsilon, ...] = ()
    # attacks that could not run on what was given, with the reason
    not_applicable: dict[str, str] = field(default_factory=dict)
    inferences: dict[str, InferenceAudit] = field(default_factory=dict)
    # attacks read back from the results folder (``out=``) rather than run by this call
    resumed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.attacks and not self.inferences:
            why = "; ".join(f"{k}: {v}" for k, v in self.not_applicable.items())
            raise ConfigError(f"attacks: none could run on what was given ({why})")

    def summary(self) -> str:
        lines = [f"audit of {self.name}"]
        if self.attacks:
            lines += self._score_lines()
        lines += [i.summary_line() for i in self.inferences.values()]
        lines += [f"{k}: not applicable: {why}" for k, why in self.not_applicable.items()]
        if self.resumed:
            resumed = ", ".join(self.resumed)
            lines.append(f"read back from the results folder, not run now: {resumed}")
        best = max(  # of membership: a link attack's bound is per edge, not per record
            (
                a.metrics["epsilon_lb"] or 0.0
                for a in self.attacks.values()
                if a.question == MEMBERSHIP
            ),
            default=0.0,
        )
        for line in epsilon_lines(self.epsilons):
            lines.append(f"{line}; the attacks' empirical lower bound: {best:.2f}")
        return "\n".join(lines)

    def _score_lines(self) -> list[str]:
        width = max(len("attack"), *(len(a) for a in self.attacks))
        lines = [
            f"{'attack':<{width}}  {'AUC [95 % CI]':<21}  {'TPR@0.01 FPR':<21}  "
            f"{'TPR@0.001 FPR':<21}  ε ≥",
        ]
        for label, a in self.attacks.items():
            m = a.metrics
            lines.append(
                f"{label:<{width}}  {interval_text(m, 'auc'):<21}  "
                f"{interval_text(m, 'tpr@0.01'):<21}  {interval_text(m, 'tpr@0.001'):<21}  "
                f"{number_text(m['epsilon_lb'], 2)}"
            )
        asked: dict[str, list[str]] = {}  # what each attack was asked about, and by whom
        for label, a in self.attacks.items():
            asked.setdefault(a.question.counts(a.metrics), []).append(label)
        if len(asked) == 1:
            lines.append(next(iter(asked)))
        else:
            lines += [f"{counts} ({', '.join(labels)})" for counts, labels in asked.items()]
        first = next(iter(self.attacks.values()))
        lines.append(
            f"ε ≥: held-out lower bound at δ = {first.delta:g}, 95 % (0: nothing certified), "
            "valid where the members were a random draw from the candidates; n/a for links "
            "(edges and non-edges are different pairs, not a random inclusion)"
        )
        lines += [  # He et al.'s own figure: the edges against uniformly drawn non-edges
            f"{label}: AUC {number_text(a.metrics['auc_uniform'])} against uniform non-edges "
            f"(He et al.), average precision {number_text(a.metrics['average_precision'])}"
            for label, a in self.attacks.items()
            if "auc_uniform" in a.metrics
        ]
        return lines

    def to_frame(self) -> pandas.DataFrame:
        """One row per attack, the metrics as columns."""
        import pandas as pd

        rows = [{"attack": k, **a.metrics} for k, a in self.attacks.items()]
        rows += [{"attack": k, **a.metrics} for k, a in self.inferences.items()]
        return pd.DataFrame(rows)

    def records(self) -> pandas.DataFrame:
        """Each candidate's score under each attack, and its membership (for a link attack:
        the pair ``"u-v"`` as its id, and whether it is an edge)."""
        import pandas as pd

        frames = [a.records().assign(attack=k) for k, a in self.attacks.items()]
        if not frames:  # only attacks that infer a value: no record was scored
            return pd.DataFrame(columns=["id", "score", "is_member", "attack"])
        return pd.concat(frames, ignore_index=True)

    def report(self, path: str | Path) -> Path:
        """One page (HTML, or PDF where ``path`` ends in ``.pdf``): a section per attack that
        scores each record, a table of those that infer a value."""
        from fgl_workbench.external.report import write_report

        return write_report(
            list(self.attacks.values()),
            f"Privacy audit of {self.name}",
            Path(path),
            epsilon_lines(self.epsilons),
            list(self.inferences.values()),
        )


def audit_model(
    model: nn.Module,
    data: Data | Sequence[Data],
    members: Sequence[int] | np.ndarray | torch.Tensor,
    *,
    level: Literal["node", "graph"] | None = None,
    nonmembers: Sequence[int] | np.ndarray | torch.Tensor | None = None,
    aux: Sequence[int] | np.ndarray | torch.Tensor | None = None,
    train_fn: TrainFn | None = None,
    attacks: Sequence[dict[str, Any]] | None = None,
    seed: int = 0,
    delta: float = DELTA,
    privacy: Any = None,
    model_factory: Callable[[], nn.Module] | None = None,
    name: str = "the model",
    out: str | Path | None = None,
) -> ModelAudit:
    """Privacy audit of a GNN ``model`` the user trained on ``data`` with ``members`` (ids
    or a boolean mask) as its training records. Node level: ``data`` is one graph (``x``,
    ``edge_index``, ``y``) and ``model(x, edge_index)`` gives node logits; graph level
    (``level`` is inferred from ``data``): a list of graphs, each with its label ``y``, and
    ``model(x, edge_index, batch)`` gives graph logits. ``nonmembers``: records it did not
    train on to ask about (default: as many of each class as the members, drawn from the
    rest); ``aux``: the adversary's own labelled records for reference models (default:
    every one left; empty: the attacks that need a pool say they do not apply).
    ``train_fn(model_factory, data, mask, seed)`` is the user's recipe, returning the trained
    model (``data``: the graph, or the list of graphs, ``mask`` the records to train on);
    without it reference models are trained with ``DEFAULT_RECIPE``, with a warning.
    ``attacks``: ``[{"name": ..., "params": {...}}]``, membership, link and attribute attacks
    (default: loss threshold, RMIA, LiRA; at node level also ``link-stealing``, He et al.'s
    unsupervised correlation of posteriors, and ``attribute-inference`` of the label). Link
    stealing is asked about the graph's edges against same-graph non-edges (2000 at most of
    each, plus uniform non-edges for He et al.'s ``auc_uniform``); its adversary knows the
    features, a fifth of the other edges and as many non-edges, while the model answers on the
    whole graph; a ``ScoreAudit`` of edges in ``attacks``. Attribute inference (``attribute:
    label`` or ``feature:J``, a column hidden outside ``aux``) is asked about the nodes outside
    ``aux``, whose attribute the adversary does not know; an ``InferenceAudit`` in
    ``inferences``, accuracy with its 95 % interval beside the prior's. At graph level both
    are named in ``not_applicable``.
    ``model_factory``: builds a fresh, untrained model for reference models (default: ``model``
    copied and re-initialised by its layers' ``reset_parameters``).
    ``privacy``: the Opacus ``PrivacyEngine`` (or its accountant) the model was trained with:
    its ε against a querier joins the audit, per graph, or ∞ per node with the reason
    (``fgl_workbench.external.privacy``). ``out``: a results folder the audit is also written
    to (``fgl_workbench.external.folder``), which ``fgl-workbench report`` and ``export``
    read; auditing the same model and split into it again runs only the attacks not stored."""
    level = records_level(data, level)
    check_run(name, seed)
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta: expected a number in (0, 1) (got {delta!r})")
    epsilons = () if privacy is None else opacus_epsilons(privacy, level, delta)
    labels = record_labels(data, level)
    n = labels.size
    rng = np.random.default_rng(seed)
    member_ids, nonmember_ids, aux_ids = _challenge(labels, members, nonmembers, aux, rng)
    if train_fn is None:
        warnings.warn(
            "audit_model: no train_fn given; reference models are trained with a default "
            f"recipe ({DEFAULT_RECIPE}, Adam): LiRA and RMIA assume it is yours",
            stacklevel=2,
        )
        train_fn = default_training
    order = rng.permutation(member_ids.size + nonmember_ids.size)  # position tells nothing
    ids = np.concatenate([member_ids, nonmember_ids])[order]
    is_member = np.concatenate(
        [np.ones(member_ids.size, bool), np.zeros(nonmember_ids.size, bool)]
    )[order]
    num_classes = int(labels.max()) + 1
    spec = ExternalSpec(factory_of(model, model_factory), num_classes, level)
    recipe = TrainingRecipe("external", {"train_fn": _qualname(train_fn)}, 1, member_ids.size)
    if attacks is None:
        attacks = NODE_ATTACKS if level == "node" else DEFAULT_ATTACKS
    entries = list(attacks)
    configs = attack_configs(entries, "querier", FAMILIES)
    family = {name: ATTACKS.get(name).family for name, _ in configs}
    user: UserGraph | None = None
    if level == "node":
        graph = data
        known = Data(x=graph.x, edge_index=graph.edge_index, num_nodes=n)  # no labels, masks
        candidates = Candidates("node", ids, labels[ids])
        knowledge = BackgroundKnowledge(
            "node",
            aux_ids,
            labels[aux_ids],
            (),
            known,
            spec,
            recipe,
        )
        hops = sorted({getattr(c, "hops", 0) for a, c in configs if family[a] == "membership"})
        answers = observed(NodeQueryAPI(model.eval(), known), hops, known, embeddings=False)
        if set(family.values()) - {"membership"}:  # the federation copies the features
            user = user_graph(model, graph, knowledge, member_ids, nonmember_ids, num_classes)
    else:
        graphs = list(data)
        candidates = Candidates("graph", ids, labels[ids], tuple(graphs[i] for i in ids))
        aux_graphs = tuple(graphs[i] for i in aux_ids)
        knowledge = BackgroundKnowledge(
            "graph",
            aux_ids,
            labels[aux_ids],
            aux_graphs,
            None,
            spec,
            recipe,
        )
        answers = GraphQueryAPI(model.eval())
    view = QuerierView(level, num_classes, answers)
    pool = ExternalPool(train_fn, derive_seed(seed, "references"))
    results, inferences, skipped, resumed = {}, {}, {}, []
    with results_folder(out, name, delta) as folder:
        if folder is not None:
            folder.open(
                audited_cell(
                    name=name,
                    model=model,
                    data=data,
                    owned={0: (member_ids, nonmember_ids)},
                    aux_ids=aux_ids,
                    train_fn=train_fn,
                    seed=seed,
                    epsilons=epsilons,
                    defenses=opacus_defense(privacy),
                )
            )
        for (attack, config), raw in zip(configs, entries, strict=True):
            entry = AttackEntry(name=attack, params=dict(raw.get("params", {})))
            label = attack_label(entry.name, entry.params)
            title = f"{name}: {label}"
            stored = None if folder is None else folder.stored(entry, ids, is_member, title)
            if stored is not None:
                results[label] = stored
                resumed.append(label)
                continue
            start = time.perf_counter()
            result: ScoreAudit | InferenceAudit | str
            try:
                if family[attack] == "membership":
                    inp = AttackInput(view, knowledge, candidates, pool)
                    score = partial(membership_audit, is_member, ids, delta, title)
                else:
                    inp, score = structure_input(family[attack], config, user, seed, delta, title)
            except NotApplicableError as exc:
                result = str(exc)
            else:
                output = ran(attack, config, inp, seed)
                result = output if isinstance(output, str) else score(output)
            if folder is not None:
                folder.put(entry, result, time.perf_counter() - start)
            if isinstance(result, str):
                skipped[label] = result
            elif isinstance(result, ScoreAudit):
                results[label] = result
            else:
                inferences[label] = result
    return ModelAudit(name, results, epsilons, skipped, inferences, tuple(resumed))


NAME_CAP = 200  # characters of an audit's name (a cell's label holds it)


def check_run(name: Any, seed: Any) -> None:
    """The audit's ``name`` (its report's title, its cell's label) and ``seed``, checked."""
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_CAP:
        raise ConfigError(f"name: expected a non-empty text of at most {NAME_CAP} characters")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise ConfigError(f"seed: expected a whole number >= 0 (got {seed!r})")


def membership_audit(
    is_member: np.ndarray, ids: np.ndarray, delta: float, title: str, out: AttackOutput
) -> ScoreAudit:
    return audit_scores(
        out.scores, is_member, ids=ids, delta=delta, threshold=out.threshold, name=title
    )


def ran(name: str, config: Any, inp: AttackInput, seed: int) -> AttackOutput | str:
    """The attack's output, or why it does not apply to what was given (``aux=`` empty for
    reference models, a view without what it reads)."""
    try:
        return ATTACKS.get(name).run(inp, config, derive_seed(seed, name))
    except NotApplicableError as exc:
        return str(exc)


def records_level(data: Any, level: str | None) -> str:
    found = "node" if isinstance(data, Data) else "graph"
    if level is not None and level != found:
        shape = "one torch_geometric Data" if level == "node" else "a list of Data graphs"
        raise ConfigError(f"data: level {level!r} expects {shape}")
    return found


def record_labels(data: Any, level: str) -> np.ndarray:
    """Each record's label (a node's, or a graph's), checked to be there."""
    if level == "node":
        for field in ("x", "edge_index", "y"):
            if not isinstance(getattr(data, field, None), torch.Tensor):
                raise ConfigError(f"data: expected a torch_geometric Data with {field} (a tensor)")
        y = data.y.numpy(force=True)
        if y.ndim != 1 or y.dtype.kind not in "iu" or (y < 0).any():
            raise ConfigError("data.y: expected one class index (>= 0) per node, a 1-D tensor")
        return y
    try:
        graphs = list(data)
    except TypeError:
        raise ConfigError("data: expected a torch_geometric Data or a list of them") from None
    for i, g in enumerate(graphs):
        if not isinstance(g, Data) or not isinstance(g.y, torch.Tensor) or g.y.numel() != 1:
            raise ConfigError(f"data[{i}]: expected a torch_geometric Data with one label y")
    if not graphs:
        raise ConfigError("data: expected at least one graph")
    return np.array([int(g.y) for g in graphs])


def _challenge(
    labels: np.ndarray, members: Any, nonmembers: Any, aux: Any, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Members, non-members and the adversary's pool: disjoint, each checked."""
    n = labels.size
    member_ids = record_ids(members, n, "members")
    taken = np.zeros(n, bool)
    taken[member_ids] = True
    if nonmembers is None:
        nonmember_ids = matched_draw(np.flatnonzero(~taken), labels, labels[member_ids], rng)
    else:
        nonmember_ids = record_ids(nonmembers, n, "nonmembers")
        if taken[nonmember_ids].any():
            raise ConfigError("nonmembers: expected records that are not members")
    taken[nonmember_ids] = True
    if aux is None:
        aux_ids = np.flatnonzero(~taken)
    else:  # an empty pool is the user's to give: the attacks that need one say so
        aux_ids = record_ids(aux, n, "aux") if np.size(aux) else np.zeros(0, np.int64)
    if taken[aux_ids].any():
        raise ConfigError("aux: expected records that are neither members nor non-members")
    return member_ids, nonmember_ids, aux_ids


def matched_draw(
    rest: np.ndarray, labels: np.ndarray, member_labels: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Non-members drawn from ``rest`` class by class, as many of each class as there are
    members of it (all of a class where fewer are left): otherwise the label alone tells
    members from non-members of a class-balanced training split (AUC 0.63 on Cora's)."""
    classes, wanted = np.unique(member_labels, return_counts=True)
    drawn = [
        rng.choice(pool, min(w, pool.size), replace=False)
        for c, w in zip(classes.tolist(), wanted.tolist(), strict=True)
        for pool in [rest[labels[rest] == c]]
    ]
    return np.sort(np.concatenate(drawn))


def attack_configs(
    entries: Sequence[dict[str, Any]], adversary: str, families: Sequence[str] = ("membership",)
) -> list[tuple[str, Any]]:
    """Each ``{"name": ..., "params": {...}}`` as (name, parsed config): built-in attacks of
    ``families`` run as ``adversary``, whose reference models (if any) replay the user's own
    recipe; a bad one refused in one line naming it, as are none and the same one twice."""
    if not entries:
        raise ConfigError("attacks: expected at least one attack")
    configs = [_config(e, i, adversary, families) for i, e in enumerate(entries)]
    labels = [attack_label(e["name"], dict(e.get("params", {}))) for e in entries]
    if len(set(labels)) != len(labels):
        raise ConfigError("attacks: expected each attack once (the same entry appears twice)")
    return configs


def _config(
    entry: dict[str, Any], i: int, adversary: str, families: Sequence[str]
) -> tuple[str, Any]:
    from pydantic import ValidationError

    name = entry.get("name") if isinstance(entry, dict) else None
    if not isinstance(name, str):
        raise ConfigError(f"attacks[{i}]: expected a mapping with a 'name'")
    # the truth is in this process: a plug-in is refused before anything of it is imported
    if ":" in name or (ATTACKS.known(name) and ATTACKS.origin(name) != BUILT_IN):
        raise ConfigError(
            f"attacks[{i}].name: {name!r} is a plug-in; an audit of your own model runs the "
            "built-in attacks only (plug-ins run fenced in a suite: fgl-workbench run)"
        )
    attack = ATTACKS.get(name, f"attacks[{i}].name")
    if attack.family not in families:
        raise ConfigError(
            f"attacks[{i}].name: {name!r} is a {attack.family} attack; this audit runs "
            f"{' and '.join(families)} attacks"
        )
    try:
        config = attack.Config(**entry.get("params", {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"attacks[{i}].params.{where}: {first['msg']}") from None
    if getattr(config, "adversary", "querier") != adversary:
        raise ConfigError(f"attacks[{i}].params.adversary: this audit observes as the {adversary}")
    if getattr(config, "trained_as", "target") != "target":
        raise ConfigError(
            f"attacks[{i}].params.trained_as: reference models are trained by your train_fn "
            "here ('target')"
        )
    return name, config


def record_ids(values: Any, n: int, field: str) -> np.ndarray:
    a = values.numpy(force=True) if isinstance(values, torch.Tensor) else np.asarray(values)
    if a.dtype == bool:
        if a.shape != (n,):
            raise ConfigError(f"{field}: a boolean mask must have one entry per record ({n})")
        a = np.flatnonzero(a)
    if a.ndim != 1 or a.dtype.kind not in "iu" or (a.size and (a.min() < 0 or a.max() >= n)):
        raise ConfigError(f"{field}: expected ids in [0, {n}) or a boolean mask")
    if np.unique(a).size != a.size:
        raise ConfigError(f"{field}: expected each record once")
    if not a.size:
        raise ConfigError(f"{field}: expected at least one record")
    return np.sort(a)


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
