"""The models an adversary can query, read from its view, and the one query call every
membership attack uses for target, shadow and reference models alike.

- External querier: the released model, black box, through the deployment's query API.
- Honest-but-curious server: every client's last uploaded weights from the transcript,
  rebuilt into the architecture it distributed; it runs them on the population graph it
  knows (node level) or on the graphs it queries (graph level)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.adversary.candidates import Candidates
from fgl_workbench.adversary.threat import BackgroundKnowledge, QuerierView, ServerView
from fgl_workbench.attacks.base import AttackInput, AttackOutput
from fgl_workbench.defenses.metric_dp import EmbeddingRelease
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.models import ModelSpec
from fgl_workbench.query import (
    GraphOwnerRoutedQueryAPI,
    GraphQueryAPI,
    NodeQueryAPI,
    OwnerRoutedQueryAPI,
    Personalised,
    QueryAPI,
)
from fgl_workbench.transcript import AGGREGATE, CIPHERTEXT, MASKED_WEIGHTS, MODEL_WEIGHTS, Message

RELEASED = "released"
AGGREGATED = "aggregate"  # the server's one model under SecAgg+: the round's unmasked mean
ENCRYPTED = (
    "not applicable: encrypted (secure aggregation: the server received only ciphertexts of "
    "the uploads and holds no secret key)"
)
MASKED = (
    "not applicable: secure aggregation (SecAgg+): the server received only masked uploads "
    "and unmasks only the round's aggregate"
)


def sealed(received: Sequence[Message], sender: str | None = None) -> str | None:
    """Why the server holds no single upload it can read (``sender``'s, or anyone's), where
    secure aggregation hid them: CKKS ciphertexts, or SecAgg+'s masked vectors."""
    kinds = {m.kind for m in received if sender is None or m.sender == sender}
    if CIPHERTEXT in kinds:
        return ENCRYPTED
    if MASKED_WEIGHTS in kinds:
        return MASKED
    return None


class QueryConfig(BaseModel):
    """Settings every membership attack shares: who attacks and how nodes are queried."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["querier", "server"] = Field(
        "querier",
        description="querier: black box on the released model; server: each client's "
        "uploaded model, rebuilt from the transcript",
    )
    hops: int = Field(0, ge=0, le=5, description="node queries: 0 = node alone, k = k-hop subgraph")
    features: Literal["raw", "ib-surrogate"] = Field(
        "raw",
        description="raw: query with the nodes' own features; ib-surrogate: the adaptive "
        "attacker against an information-bottleneck target encodes them with its own encoder "
        "and works in that space throughout (target queries, shadow and reference models)",
    )


def model_api(
    model: nn.Module | Personalised, knowledge: BackgroundKnowledge
) -> QueryAPI | OwnerRoutedQueryAPI | GraphOwnerRoutedQueryAPI:
    """A query API over a model the adversary holds itself (a model per client: each node or
    graph answered by its owner's, as the target it mirrors answers)."""
    if knowledge.level == "node":
        assert knowledge.graph is not None, "node-level models answer on the population graph"
        return node_api(model, knowledge.graph)
    if isinstance(model, Personalised):
        return GraphOwnerRoutedQueryAPI(model.models, model.owner)
    return GraphQueryAPI(model)


def node_api(
    model: nn.Module | Personalised, graph: Data, ids: np.ndarray | None = None
) -> NodeQueryAPI | OwnerRoutedQueryAPI:
    """A query API over the adversary's model on ``graph``, whose node i is population node
    ``ids[i]`` (default: ``graph`` is the population's); a personalised model routes each
    node to the model of the client holding it."""
    if not isinstance(model, Personalised):
        return NodeQueryAPI(model, graph)
    owner = model.owner if ids is None else model.owner[ids]
    return OwnerRoutedQueryAPI(model.models, graph, owner)


def observed_apis(inp: AttackInput, attack: str) -> dict[str, QueryAPI]:
    """Name → query API of every target model this adversary observes."""
    view = inp.view
    if isinstance(view, QuerierView):
        if isinstance(view.api, EmbeddingRelease):
            raise NotApplicableError(
                f"{attack}: not applicable: the target releases only metric-DP node embeddings, "
                "no posteriors"
            )
        return {RELEASED: view.api}
    if isinstance(view, ServerView):
        last: dict[str, dict[str, torch.Tensor]] = {}
        aggregates = [m for m in view.received if m.kind == AGGREGATE and m.payload is not None]
        if aggregates and sealed(view.received) == MASKED:  # the only model it holds
            state = aggregates[-1].payload
            return {AGGREGATED: rebuilt_api(view.spec, state, inp.knowledge, attack)}
        for m in uploaded_weights(view, attack):
            last[m.sender] = m.payload  # messages are in round order: the last one wins
        return {
            sender: rebuilt_api(view.spec, state, inp.knowledge, attack)
            for sender, state in sorted(last.items())
        }
    raise NotApplicableError(f"{attack}: needs the querier's or the server's view")


def uploaded_weights(view: ServerView, attack: str) -> list[Message]:
    """Every upload of model weights whose payload the transcript kept, in round order;
    refused where the server holds none it can rebuild."""
    kept = [m for m in view.received if m.kind == MODEL_WEIGHTS and m.payload is not None]
    reason = sealed(view.received)
    if not kept and reason is not None:
        raise NotApplicableError(f"{attack}: {reason}")
    if not kept:
        raise NotApplicableError(
            f"{attack}: the server received no model weights it can rebuild (the target "
            "uploads none, or its keep_payloads is 'none')"
        )
    return kept


def rebuilt_api(
    spec: ModelSpec, state: dict[str, torch.Tensor], knowledge: BackgroundKnowledge, attack: str
) -> QueryAPI | OwnerRoutedQueryAPI | GraphOwnerRoutedQueryAPI:
    """A query API over the architecture the adversary knows, loaded with weights it observed
    (an upload, or a global model it was sent)."""
    return model_api(rebuilt_model(spec, state, attack), knowledge)


def rebuilt_model(spec: ModelSpec, state: dict[str, torch.Tensor], attack: str) -> nn.Module:
    """The architecture the adversary knows loaded with weights it observed; not applicable
    where the weights leave out modules each client keeps to itself."""
    model = spec.build()
    kept = sorted(
        {k.split(".", 1)[0] for k in model.state_dict()} - {k.split(".", 1)[0] for k in state}
    )
    if kept:
        raise NotApplicableError(
            f"{attack}: not applicable: the uploads leave out the modules each client "
            f"keeps to itself ({', '.join(kept)}), so the server holds no model that answers"
        )
    model.load_state_dict(state)
    return model


def query(api: QueryAPI, records: Candidates, hops: int) -> torch.Tensor:
    """Logits of ``records``: node queries with ``hops``-hop neighbourhoods, or graphs."""
    if isinstance(api, GraphQueryAPI):
        return api.logits(list(records.graphs))
    if isinstance(api, GraphOwnerRoutedQueryAPI):  # routed by the graphs' population ids
        return api.logits(list(records.graphs), records.ids)
    return api.logits(records.ids, hops)


def per_model_output(
    per_model: dict[str, np.ndarray], threshold: float | None = None
) -> AttackOutput:
    """One score per candidate from several observed models: the maximum, i.e. the adversary
    flags a record if any client's model looks like it trained on it. Per-model scores go to
    ``details`` so the evaluator can score each client's model on that client's records."""
    names = sorted(per_model)
    stacked = np.stack([per_model[n] for n in names])
    details = {"per_model": dict(zip(names, stacked, strict=True))} if len(names) > 1 else {}
    return AttackOutput(stacked.max(0), threshold, details)


def true_label_logit_margin(logits: torch.Tensor, labels: np.ndarray) -> np.ndarray:
    """log p_y − log(1 − p_y), computed stably from logits (Carlini et al.'s scaled confidence)."""
    z = logits.double()
    y = torch.as_tensor(np.asarray(labels, dtype=np.int64))[:, None]
    zy = z.gather(1, y).squeeze(1)
    rest = z.scatter(1, y, float("-inf")).logsumexp(1)
    return (zy - rest).numpy(force=True)


def true_label_prob(logits: torch.Tensor, labels: np.ndarray) -> np.ndarray:
    y = torch.as_tensor(np.asarray(labels, dtype=np.int64))[:, None]
    return logits.double().softmax(1).gather(1, y).squeeze(1).numpy(force=True)
