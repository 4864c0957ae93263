"""Attacks never see ground truth: for every registered attack, as every party its family
allows and from every source it can read, every object reachable from what the attack
receives (view, knowledge, candidates; recursively, private attributes, closures and bound
methods included) is walked, and none may be the target, a deployment holding data, the
federation or another client's data, nor hold membership labels, masks, the population's
labels or the attribute or features the attack is asked to infer."""

from __future__ import annotations

import types
from collections.abc import Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fgl_workbench.adversary.threat import ClientView
from fgl_workbench.attacks import ATTACKS, AttackInput
from fgl_workbench.attacks.families import FAMILIES, adversaries
from fgl_workbench.attacks.reconstruction.structure import structure_challenge
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.query import (
    ClientDeployments,
    GraphOwnerRoutedQueryAPI,
    NodeQueryAPI,
    OwnerRoutedQueryAPI,
)
from fgl_workbench.targets import TARGETS
from fgl_workbench.targets.base import TrainedTarget

LEAVES = (str, bytes, int, float, bool, complex, type(None), type, types.ModuleType)
LEAVES += (np.ndarray, torch.Tensor, torch.dtype, torch.device)


def reachable(root: Any) -> Iterator[tuple[str, Any]]:
    """Every object reachable from ``root``, with a path to it: containers, instance
    attributes (``__dict__`` and slots), closures, bound methods and partials."""
    seen: set[int] = set()
    stack = [("input", root)]
    while stack:
        path, obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield path, obj
        if isinstance(obj, LEAVES):
            continue
        children: list[tuple[str, Any]] = []
        if isinstance(obj, dict):
            children += [(f"{path}[{k!r}]", v) for k, v in obj.items()]
            children += [(f"{path}.keys()", k) for k in obj]
        elif isinstance(obj, list | tuple | set | frozenset):
            children += [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
        elif isinstance(obj, types.FunctionType):
            cells = obj.__closure__ or ()
            children += [(f"{path}.<closure {i}>", c.cell_contents) for i, c in enumerate(cells)]
            children += [(f"{path}.__defaults__", obj.__defaults__)]
        elif isinstance(obj, types.MethodType):
            children += [(f"{path}.__self__", obj.__self__), (f"{path}.__func__", obj.__func__)]
        else:
            children += [(f"{path}.{k}", v) for k, v in getattr(obj, "__dict__", {}).items()]
            for cls in type(obj).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if isinstance(slot, str) and hasattr(obj, slot):
                        children.append((f"{path}.{slot}", getattr(obj, slot)))
        stack.extend(children)


def same(a: Any, b: np.ndarray) -> bool:
    if isinstance(a, torch.Tensor):
        a = a.detach().cpu().numpy()
    return isinstance(a, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)


def forbidden(fed, trained: TrainedTarget, own: int | None) -> dict[int, str]:
    """Objects no attack may reach, by identity."""
    out = {id(trained): "the trained target", id(fed): "the federation"}
    out[id(fed.partition)] = "the partition"
    out[id(fed.dataset)] = "the dataset"
    if hasattr(fed.dataset, "data"):
        out[id(fed.dataset.data)] = "the population graph object (labels, masks)"
    if trained.served is not None:
        out[id(trained.served)] = "the clients' deployments (their data)"
    for k, c in enumerate(fed.clients):
        if k == own:
            continue
        out[id(c)] = f"client {k}"
        for split in ("train", "val", "test"):  # graph level: the client's lists of graphs
            if hasattr(c, split):
                out[id(getattr(c, split))] = f"client {k}'s {split} graphs"
        data = getattr(c, "data", None)
        if data is not None:
            out[id(data)] = f"client {k}'s data"
            for key, value in data.items():
                out[id(value)] = f"client {k}'s {key}"
    return out


def truths(fed, own: int | None) -> list[tuple[str, np.ndarray]]:
    """Arrays whose contents no attack may hold: the population's labels and membership
    masks, every other client's masks."""
    ds = fed.dataset
    out = [("the population's labels", np.asarray(ds.labels))]
    owner = fed.partition.owner(ds.num_items)
    member = np.zeros(ds.num_items, dtype=bool)
    for k, c in enumerate(fed.clients):
        data = getattr(c, "data", None)
        if data is None or not hasattr(data, "train_mask"):
            continue
        member[np.asarray(data.global_id)[data.train_mask.numpy()]] = True
        if k != own:
            for key in ("train_mask", "val_mask", "test_mask"):
                out.append((f"client {k}'s {key}", data[key].numpy()))
    out += [("who trained (membership)", member), ("the partition's owners", owner)]
    return out


def configs(attack) -> Iterator[dict[str, Any]]:
    """The parameter settings that change what the attack receives."""
    fields = attack.Config.model_fields
    options: list[dict[str, Any]] = [{}]
    if "adversary" in fields:
        options = [{"adversary": a} for a in adversaries(attack)]
    if "source" in fields:
        sources = getattr(fields["source"].annotation, "__args__", ())
        options = [{**o, "source": s} for o in options for s in sources]
    if "attribute" in fields:
        options += [{**o, "attribute": "feature:0"} for o in options]
    yield from options


def cases():
    for name in ATTACKS.names():
        attack = ATTACKS.get(name)
        for params in configs(attack):
            yield pytest.param(name, params, id=f"{name}-{params}")


@pytest.fixture(scope="module")
def cells(small_csbm, small_graphs):
    node_fed = build_federation(
        small_csbm, make_partition(small_csbm, "louvain", 3, seed=0, aux_fraction=0.2)
    )
    graph_fed = build_federation(small_graphs, make_partition(small_graphs, "iid", 3, seed=0))
    fit = {"rounds": 2, "keep_payloads": "all"}
    fedavg = TARGETS.get("fedavg")
    stage = {"epochs": 5, "eval_every": 5, "patience": 1}
    fast = {"surrogate": {"iterations": 5}, "stage1": stage, "stage2": stage}
    masks = [applied("masked-aggregation", {})]
    return {
        "node": (node_fed, fedavg.fit(node_fed, fit, [], 0)),
        "graph": (graph_fed, fedavg.fit(graph_fed, fit, [], 0)),
        # each client's own model behind one routed interface (GCFL's FedAvg)
        "graph-personalised": (
            graph_fed,
            fedavg.fit(graph_fed, {**fit, "keep_local": ["project", "head"]}, [], 0),
        ),
        "personalised": (node_fed, TARGETS.get("opfgl").fit(node_fed, fast, masks, 0)),
    }


@pytest.mark.parametrize(("name", "params"), list(cases()))
def test_nothing_an_attack_receives_reaches_ground_truth(name, params, cells, cell_inputs):
    attack = ATTACKS.get(name)
    try:
        cfg = attack.Config(**params)
    except ValidationError:
        pytest.skip("not a valid combination of this attack's parameters")
    received = []
    for fed, trained in cells.values():
        cell = cell_inputs(trained, fed)
        try:
            family = FAMILIES[attack.family].inputs(attack, cfg, cell)
        except (NotApplicableError, ConfigError):
            continue
        inp = AttackInput(family.view, family.knowledge, family.candidates, family.references)
        received.append(check(inp, fed, trained, asked(attack.family, cfg, fed, inp, cell)))
    if not received:
        pytest.skip("not applicable to FedAvg at node or graph level, nor to O-pFGL")


def test_the_walk_finds_the_leaks_the_old_views_had(cells, cell_inputs):
    """Deliberately broken views, as before this issue: the served view holding the clients'
    deployments (their data), the querier's view holding the deployment's population graph
    while the attribute it is asked about is hidden from its knowledge."""
    fed, trained = cells["node"]
    attack = ATTACKS.get("link-stealing")
    family = FAMILIES["link"].inputs(attack, attack.Config(), cell_inputs(trained, fed))
    leaky = replace(family.view, api=trained.served)
    with pytest.raises(AssertionError, match="the clients' deployments"):
        check(AttackInput(leaky, family.knowledge, family.candidates), fed, trained, [])
    attack = ATTACKS.get("attribute-inference")
    cfg = attack.Config(attribute="feature:0")
    family = FAMILIES["attribute"].inputs(attack, cfg, cell_inputs(trained, fed))
    inp = AttackInput(replace(family.view, api=trained.query), family.knowledge, family.candidates)
    with pytest.raises(AssertionError, match="true features"):
        check(inp, fed, trained, asked("attribute", cfg, fed, inp))
    copied = SimpleNamespace(rows=fed.dataset.data.x.clone())  # a copy: found by content
    inp = AttackInput(replace(family.view, api=copied), family.knowledge, family.candidates)
    with pytest.raises(AssertionError, match="api.rows holds the hidden column"):
        check(inp, fed, trained, asked("attribute", cfg, fed, inp))


def test_the_walk_finds_the_structure_challenges_permutation(cells, cell_inputs):
    """A structure knowledge that kept the scorer's node order (a copy of it) is caught."""
    for fed, trained in (cells["node"], cells["graph"]):
        cell = cell_inputs(trained, fed)
        attack = ATTACKS.get("structure-inversion")
        cfg = attack.Config()
        family = FAMILIES["link"].inputs(attack, cfg, cell)
        task = structure_challenge(fed, 0, cell.seeds("structure-challenge"))
        leaky = replace(family.knowledge, aux_ids=task.rows.copy())
        inp = AttackInput(family.view, leaky, family.candidates)
        with pytest.raises(AssertionError, match="the challenge's node order"):
            check(inp, fed, trained, asked("link", cfg, fed, inp, cell))


def asked(family: str, cfg: Any, fed, inp: AttackInput, cell: Any = None) -> list[tuple[str, Any]]:
    """What the attack must infer, as a test on a reachable tensor: the hidden column or the
    labels of the attribute challenge's nodes, the feature challenge's feature rows, the
    client's edges and (with the ``cell``) the structure challenge's scorer-side truths."""
    if family == "link" and getattr(cfg, "adversary", None) == "server":
        edges = client_edges(fed.clients[cfg.client])
        return edges if cell is None else edges + structure_truths(cell, cfg.client)
    x = getattr(getattr(fed.dataset, "data", None), "x", None)
    nodes = inp.candidates
    if x is None or not isinstance(nodes, np.ndarray):
        return []
    rows = torch.from_numpy(nodes)
    if family == "feature":
        truth = x[rows].numpy()
        return [("the features asked about", lambda t, n: table(t, n) and same(t[rows], truth))]
    if family == "attribute" and str(cfg.attribute).startswith("feature:"):
        j = int(cfg.attribute.split(":")[1])
        truth = x[rows, j].numpy()
        column = lambda t, n: table(t, n) and t.shape[1] > j and same(t[rows, j], truth)  # noqa: E731
        return [("the hidden column", column)]
    if family == "attribute":
        labels = np.asarray(fed.dataset.labels)[nodes]
        return [("the labels asked about", lambda t, n: t.ndim == 1 and same(t, labels))]
    return []


def client_edges(c: Any) -> list[tuple[str, Any]]:
    """A structure adversary's secret: the client's edges (node level), or those of its
    training graphs, as an edge list in any form a copy would keep."""
    lists = [c.data.edge_index] if hasattr(c, "data") else [g.edge_index for g in c.train]
    keys = {tuple(e.shape): e for e in lists}

    def holds(t: torch.Tensor, n: int) -> bool:
        e = keys.get(tuple(t.shape))
        return e is not None and same(t, e.numpy())

    return [("the client's edges", holds)]


def structure_truths(cell: Any, k: int) -> list[tuple[str, Any]]:
    """The structure challenge's scorer side: which pairs are edges, and the permutation
    that maps the shuffled node order the attack is told back to the client's own."""
    task = cell.shared(
        ("structure", k),
        lambda: structure_challenge(cell.federation, k, cell.seeds("structure-challenge")),
    )
    return [
        ("the challenge's node order", lambda t, n: t.ndim == 1 and same(t, task.rows)),
        ("which pairs are edges", lambda t, n: t.ndim == 1 and same(t, task.is_edge)),
    ]


def table(t: torch.Tensor, n: int) -> bool:
    """A per-node table of the population: one row per node."""
    return t.ndim == 2 and t.shape[0] == n


def check(inp: AttackInput, fed, trained: TrainedTarget, secrets: list) -> int:
    own = inp.view.client_id if isinstance(inp.view, ClientView) else None
    banned = forbidden(fed, trained, own)
    arrays = truths(fed, own)
    n = fed.dataset.num_items
    count = 0
    for path, obj in reachable(inp):
        count += 1
        assert id(obj) not in banned, f"{path} is {banned[id(obj)]}"
        routed = ClientDeployments | OwnerRoutedQueryAPI | GraphOwnerRoutedQueryAPI
        assert not isinstance(obj, routed), path
        if isinstance(obj, NodeQueryAPI):
            x = fed.dataset.data.x if hasattr(fed.dataset, "data") else None
            assert obj._x is not x or inp.knowledge.graph.x is x, f"{path} holds true features"
        if isinstance(obj, np.ndarray | torch.Tensor) and obj.ndim == 1:
            for what, truth in arrays:
                assert not same(obj, truth), f"{path} holds {what}"
        if isinstance(obj, np.ndarray | torch.Tensor) and obj.ndim in (1, 2):
            for what, holds in secrets:
                assert not holds(torch.as_tensor(obj), n), f"{path} holds {what}"
    return count
