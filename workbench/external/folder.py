"""``out=DIR`` of ``audit_model`` and ``audit_uploads``: the audit as an ordinary results
folder, which ``fgl-workbench report``, ``export`` and ``results`` read as they read a suite's,
so several models audited into one folder (say, one trained with DP and one without) are
compared in one report.

A cell is one audited model. Its configuration names the data, the split and the weights by
content hashes (the same model on the same split resumes into the same cell; a retrained
model is a new cell), the recipe by the user's function's name, and DP training by the
history ``privacy=`` gave. Its utility is the model's accuracy on the non-members (records
it did not train on); its ε the one ``privacy=`` states, against a querier. Each attack's row
is written as it finishes, with its ROC and per-record scores, so a crash keeps what finished
and a re-run reads those rows back instead of running them again.

The model itself is not stored: reading a folder never runs code, and a user's model is code.
So ``fgl-workbench attack`` refuses such a folder, naming the way to add attacks to it: the
same audit again with more ``attacks=``."""

from __future__ import annotations

import functools
import hashlib
import json
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import f1_score
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.accountants import AdversaryEpsilon
from fgl_workbench.data.datasets import GraphDataset, NodeDataset
from fgl_workbench.data.partition import ClientPart, Partition
from fgl_workbench.errors import ConfigError
from fgl_workbench.external.inference import InferenceAudit
from fgl_workbench.external.scores import MEMBERSHIP, ScoreAudit, audit_records
from fgl_workbench.query import GraphQueryAPI
from fgl_workbench.running.suite import AttackEntry, config_hash
from fgl_workbench.storage.records import ScoredRecords
from fgl_workbench.storage.store import (
    EXTERNAL,
    AttackRow,
    CellRow,
    ResultsStore,
    writing,
)

Result = ScoreAudit | InferenceAudit | str  # a finished attack, or why it did not apply


def content_hash(*parts: torch.Tensor | np.ndarray) -> str:
    """A short hash of arrays' dtypes, shapes and bytes: the same data, split or weights
    give the same cell id, different ones a different cell."""
    h = hashlib.sha256()
    for p in parts:
        a = np.ascontiguousarray(p.numpy(force=True) if isinstance(p, torch.Tensor) else p)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def records_hash(data: Data | Sequence[Data]) -> str:
    graphs = [data] if isinstance(data, Data) else list(data)
    return content_hash(*(t for g in graphs for t in (g.x, g.edge_index, g.y)))


def state_hash(state: Mapping[str, torch.Tensor]) -> str:
    """A state dict's names and tensors, hashed."""
    return content_hash(np.frombuffer("\n".join(state).encode(), np.uint8), *state.values())


def recipe_text(fn: Callable[..., Any] | None) -> str:
    """The user's training function as a cell names it: its qualified name and a hash of the
    code it runs (bytecode, constants, names; a ``partial``'s arguments), so an edited recipe
    under the same name is a new cell, not one whose stored rows a re-run reads back."""
    if fn is None:
        return "not given"
    h = hashlib.sha256()
    inner = fn
    while isinstance(inner, functools.partial):
        h.update(_stable((inner.args, sorted(inner.keywords.items()))).encode())
        inner = inner.func
    code = getattr(inner, "__code__", None)
    if code is not None:
        _hash_code(h, code)
    name = f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', '?')}"
    return f"{name} #{h.hexdigest()[:8]}"


def _hash_code(h: Any, code: types.CodeType) -> None:
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:  # nested functions' code by content, not by address
        if isinstance(const, types.CodeType):
            _hash_code(h, const)
        else:
            h.update(_stable(const).encode())


def _stable(obj: Any) -> str:
    """Text of a value that is the same in every process: a function or class by its
    qualified name (its repr holds its address)."""
    if isinstance(obj, tuple | list):
        return "(" + ",".join(_stable(o) for o in obj) + ")"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"{getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return repr(obj)


def model_answers(model: nn.Module, data: Data | Sequence[Data]) -> torch.Tensor:
    """The model's logits for every record, as it serves them (node level: one forward
    pass on the whole graph): what names the model in a cell (its weights and its code
    together) and what its utility is measured on."""
    with torch.no_grad():
        if isinstance(data, Data):
            return model.eval()(data.x, data.edge_index).detach()
        return GraphQueryAPI(model).logits(list(data)).detach()


def answer_utility(answers: torch.Tensor, labels: np.ndarray, ids: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-F1 of the answers on records ``ids`` (the non-members: records the
    model did not train on)."""
    predicted = answers[torch.as_tensor(ids)].argmax(1).numpy(force=True)
    truth = labels[ids]
    return {
        "accuracy": float((predicted == truth).mean()),
        "macro_f1": float(f1_score(truth, predicted, average="macro")),
    }


def audited_cell(
    *,
    name: str,
    model: nn.Module,
    data: Data | Sequence[Data],
    owned: dict[int, tuple[np.ndarray, np.ndarray]],
    aux_ids: np.ndarray,
    train_fn: Callable[..., Any] | None,
    seed: int,
    epsilons: Sequence[AdversaryEpsilon] = (),
    defenses: Sequence[dict[str, Any]] = (),
    comm: dict[str, Any] | None = None,
    logged: Mapping[str, torch.Tensor] | None = None,
) -> CellRow:
    """The cell row of one audited model: ``owned[k]`` is client ``k``'s (members,
    non-members) (one client for a centrally trained model); the model is named by its
    weights, its answers and the recipe's code (``logged``: a federation's uploads too),
    ``defenses`` say what its training states about DP, ``comm`` what the federation sent
    (none: trained in one place)."""
    level = "node" if isinstance(data, Data) else "graph"
    dataset = _dataset(data)
    labels = dataset.labels
    n = labels.size
    answers = model_answers(model, data)
    nonmembers = np.sort(np.concatenate([o for _, o in owned.values()]))
    data_name = f"data {records_hash(data)[:8]}"
    split = content_hash(*(a for m, o in owned.values() for a in (m, o)), aux_ids)
    target: dict[str, Any] = {
        "name": "external",
        "params": {
            "weights": state_hash(model.state_dict() | dict(logged or {})),
            "answers": content_hash(answers),
            "train_fn": recipe_text(train_fn),
            "split": split,
        },
    }
    if defenses:
        target["defenses"] = list(defenses)
    config = {
        "dataset": {"name": data_name, "level": level, "records": n},
        "partition": {
            "method": "given",
            "num_clients": len(owned),
            "aux_fraction": round(aux_ids.size / n, 4),
        },
        "target": target,
        "seed": seed,
    }
    cell_id = config_hash(config)[:16]
    querier = [e.epsilon for e in epsilons if e.adversary == "querier"]
    return CellRow(
        cell_id,
        f"{data_name}/given-{len(owned)}/{name}/seed{seed}",
        config,
        answer_utility(answers, labels, nonmembers),
        comm or communication(0, 0, 0, 0),
        [vars(s) for s in _partition(data, owned, aux_ids).stats(dataset)],
        querier[0] if querier else None,
        0.0,
        0.0,
        tuple(vars(e) for e in epsilons),
    )


def communication(rounds: int, messages: int, up: int, down: int) -> dict[str, Any]:
    """A cell's communication as the store keeps it (``running.cell.communication``'s keys)."""
    return {
        "bytes": {"up": up, "down": down},
        "messages": messages,
        "rounds": rounds,
        "bytes_by_kind": {},
    }


def _dataset(data: Data | Sequence[Data]) -> NodeDataset | GraphDataset:
    if isinstance(data, Data):
        return NodeDataset("external", data, int(data.y.max()) + 1)
    graphs = list(data)
    return GraphDataset("external", graphs, max(int(g.y) for g in graphs) + 1)


def _partition(
    data: Data | Sequence[Data], owned: dict[int, tuple[np.ndarray, np.ndarray]], aux: np.ndarray
) -> Partition:
    empty = np.zeros(0, np.int64)
    clients = tuple(
        ClientPart(k, np.sort(np.concatenate([m, o])), m, empty, o) for k, (m, o) in owned.items()
    )
    return Partition("node" if isinstance(data, Data) else "graph", "given", clients, aux)


class AuditFolder:
    """The folder one audit writes into, held (``writing``'s lock) for the audit's length:
    its cell row first (``open``), then each attack's row as it finishes (``put``)."""

    def __init__(self, store: ResultsStore, delta: float) -> None:
        self.store, self.delta = store, delta
        self.cell: CellRow | None = None
        self._stored: dict[str, AttackRow] = {}

    def open(self, cell: CellRow) -> None:
        self.store.put_cell(cell, config_hash(cell.config))
        self.cell = cell
        self._stored = {a.attack_key: a for a in self.store.attacks() if a.cell_id == cell.cell_id}

    def stored(
        self, entry: AttackEntry, ids: np.ndarray, is_member: np.ndarray, name: str
    ) -> ScoreAudit | None:
        """A yes/no attack this cell already has a row for, read back from its records; None
        (run it) where there is none, or its records are not this audit's candidates, or its
        stored figures are not its records'. Reading back trusts the folder otherwise: a
        folder someone else wrote is checked by auditing into a new one."""
        assert self.cell is not None, "open(cell) first"
        row = self._stored.get(entry.key)
        if row is None:
            return None
        records = self.store.load_records(self.cell.cell_id, entry.key)
        if records is None:
            return None  # stored without records (not applicable, or an inference)
        if not (np.array_equal(records.ids, ids) and np.array_equal(records.is_member, is_member)):
            return None  # not what this audit asks about (the folder was changed): run again
        audit = audit_records(records, self.delta, name)
        if row.metrics != audit.metrics:
            return None  # the row's figures are not its records' (the folder was changed)
        return audit

    def put(self, entry: AttackEntry, result: Result, seconds: float) -> None:
        """The attack's row (with its ROC and per-record scores for a yes/no attack)."""
        assert self.cell is not None, "open(cell) first"
        cell_id, key = self.cell.cell_id, entry.key
        metrics, artifact, reason = None, None, None
        if isinstance(result, str):
            reason = result
        else:
            metrics = result.metrics
        if isinstance(result, ScoreAudit):
            artifact = self.store.save_roc(cell_id, key, result.roc.fpr, result.roc.tpr)
        if isinstance(result, ScoreAudit) and result.question == MEMBERSHIP:  # as a suite's rows
            threshold = np.nan if result.threshold is None else result.threshold
            records = ScoredRecords(result.ids, result.scores, result.is_member, threshold)
            self.store.save_records(cell_id, key, records)
        status = "ok" if reason is None else "not_applicable"
        row = AttackRow(
            cell_id, key, entry.name, entry.params, status, reason, metrics, artifact, seconds
        )
        row_hash = config_hash({"cell": self.cell.config, "attack": entry.model_dump()})
        self.store.put_attack(row, row_hash)


@contextmanager
def results_folder(out: str | Path | None, name: str, delta: float) -> Iterator[AuditFolder | None]:
    """The results folder ``out`` (made if absent; None: no folder), held for the audit, and
    its HTML and PDF report written once the audit is in. An external audits' folder only (a
    suite's holds models it can restore; a mix would leave ``attack`` half able), at one δ
    (its ROC ceilings and ε bounds are at that δ)."""
    if out is None:
        yield None
        return
    with writing(out):
        store = ResultsStore(out)
        try:
            suite = store.suite()
            if (suite or store.cells()) and store.meta(EXTERNAL) is None:
                raise ConfigError(
                    f"out: {out} holds a suite's results; audit your model into another folder"
                )
            if suite and float(suite.get("delta", delta)) != delta:
                raise ConfigError(
                    f"delta: {out} holds audits at δ = {suite['delta']:g}; audit at that δ or "
                    "into another folder"
                )
            if not suite:
                store.set_meta(EXTERNAL, "1")
                store.set_meta("suite_name", name)
                store.set_meta("suite_json", json.dumps({"name": name, "delta": delta}))
            yield AuditFolder(store, delta)
        finally:
            store.close()
    from fgl_workbench.reports import build_report  # the report draws: loaded when asked

    build_report(out)
