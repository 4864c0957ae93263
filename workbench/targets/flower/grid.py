"""Where Flower's messages go and what the workbench keeps of them.

``InlineGrid`` delivers each message a ``ServerApp``'s strategy pushes to a ``ClientApp`` in
this process (Flower's own app objects, mods and serialisation-free records), the way the
simulation engine's workers do without the Ray actors: fast and deterministic, for suites and
tests. ``RecordingGrid`` wraps any ``Grid`` (inline, simulation or deployment) and writes every
message that crosses it to the ``Transcript``: the server's view is exactly the replies it
received, each message's size is its serialised protobuf's, so bytes are measured, not
estimated."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import uuid4

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.serde import (
    config_record_to_proto,
    metadata_to_proto,
    metric_record_to_proto,
    recorddict_to_proto,
)
from flwr.compat.common import recorddict_compat as compat
from flwr.proto.message_pb2 import Message as ProtoMessage
from flwr.serverapp import Grid

from fgl_workbench.defenses.masked_aggregation import KEY_SHARES, SURVIVORS, UNMASK_SHARES
from fgl_workbench.transcript import (
    MASKED_WEIGHTS,
    METRICS,
    MODEL_WEIGHTS,
    PUBLIC_KEY,
    SECAGG_CONFIG,
    SERVER,
    Transcript,
    client,
)

FIRST_NODE_ID = 1001  # node ids the inline grid hands out (Flower's SuperLink is node 1)
# what SecAgg+'s messages carry at each stage: the server's request, the client's reply
SECAGG_SENT = {
    Stage.SETUP: SECAGG_CONFIG,
    Stage.SHARE_KEYS: PUBLIC_KEY,  # the neighbours' public keys
    Stage.COLLECT_MASKED_VECTORS: KEY_SHARES,  # the encrypted shares, forwarded
    Stage.UNMASK: SURVIVORS,  # which neighbours' masked vectors arrived
}
SECAGG_REPLY = {
    Stage.SETUP: PUBLIC_KEY,
    Stage.SHARE_KEYS: KEY_SHARES,  # shares encrypted for each neighbour
    Stage.COLLECT_MASKED_VECTORS: MASKED_WEIGHTS,
    Stage.UNMASK: UNMASK_SHARES,
}


def node_party(node_id: int) -> str:
    """A node's name in the transcript until it is known which client it is."""
    return f"node:{node_id}"


class NotingClientApp(ClientApp):
    """``inner``, each node noting which partition (``node_config["partition-id"]``) it is
    in ``registry`` before it answers: how the experimenter learns which node is which
    client, out of band (the server sees node ids, as a real one does)."""

    def __init__(self, inner: ClientApp, registry: str | Path) -> None:
        super().__init__()
        self.inner, self.registry = inner, str(registry)

    def __call__(self, message: Message, context: Context) -> Message:
        partition = context.node_config.get("partition-id")
        if partition is not None:
            (Path(self.registry) / str(context.node_id)).write_text(str(int(partition)))
        return self.inner(message, context)


def noted_clients(registry: str | Path) -> dict[str, str]:
    """Node party → client party, as ``NotingClientApp``'s nodes noted them."""
    return {node_party(int(f.name)): client(int(f.read_text())) for f in Path(registry).iterdir()}


def inline_party(node_id: int) -> str:
    """The client an inline grid's node is (node ``FIRST_NODE_ID + k`` holds partition k)."""
    return client(node_id - FIRST_NODE_ID)


class InlineGrid(Grid):
    """``num_nodes`` nodes running ``client_app`` in this process; node ``FIRST_NODE_ID + k``
    holds partition k (``context.node_config["partition-id"]``); each is given ``run_config``
    (an app's ``[tool.flwr.app.config]``)."""

    def __init__(
        self,
        client_app: Callable[[Message, Context], Message],
        num_nodes: int,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        self._app = client_app
        self._pending: dict[str, Message] = {}
        self._contexts = {
            FIRST_NODE_ID + k: Context(
                run_id=1,
                node_id=FIRST_NODE_ID + k,
                node_config={"partition-id": k, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config=dict(run_config or {}),
            )
            for k in range(num_nodes)
        }

    def set_run(self, run: Any) -> None:  # one run per grid
        pass

    @property
    def run(self) -> Any:
        """The one run it serves (Flower's legacy client manager reads its id)."""
        return SimpleNamespace(run_id=1)

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        raise NotImplementedError("deprecated in Flower; strategies build Message objects")

    def get_node_ids(self) -> Iterable[int]:
        return list(self._contexts)

    def get_nodes(self) -> Iterable[Any]:
        return []

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's grids do
            self._pending[msg.metadata.message_id] = msg
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = []
        for i in message_ids:
            msg = self._pending.pop(i)
            # each node gets its own copy, as over a wire (a strategy shares one content
            # among its messages, and a mod may change what it receives)
            msg.content = copy.deepcopy(msg.content)
            replies.append(self._app(msg, self._contexts[msg.metadata.dst_node_id]))
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.pull_messages(list(self.push_messages(messages)))


class RecordingGrid(Grid):
    """``inner`` with every message sent and every reply received written to ``transcript``:
    a message's model arrays as ``model_weights`` (a state dict), its metrics as ``metrics``
    (a dict of floats), SecAgg+'s records by stage (``SECAGG_SENT``, ``SECAGG_REPLY``: a dict
    of what the record holds), the message's serialised bytes split between them by their
    records' own sizes (the first part holds the rest: metadata, other configs). ``party``:
    the transcript's name for a node id (``node_party`` where which client a node is becomes
    known only after the run). ``names``: the state dict's keys, where messages carry Flower's
    legacy Parameters (arrays named by position)."""

    def __init__(
        self,
        inner: Grid,
        transcript: Transcript,
        party: Callable[[int], str] = node_party,
        names: Sequence[str] | None = None,
    ) -> None:
        self.inner = inner
        self.transcript = transcript
        self.party = party
        self.names = None if names is None else list(names)
        self.round = 0
        self.stage: str | None = None  # the SecAgg+ stage of the last requests sent
        # the Flower message type (train, evaluate, query, ...) of each message it recorded,
        # in the transcript's order
        self.message_types: list[str] = []

    def set_run(self, run: Any) -> None:
        self.inner.set_run(run)

    @property
    def run(self) -> Any:
        return self.inner.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self.inner.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def get_nodes(self) -> Iterable[Any]:
        return self.inner.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        sent = list(messages)
        self._record_sent(sent)
        return self.inner.push_messages(sent)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self.inner.pull_messages(message_ids))
        self._record_replies(replies)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        sent = list(messages)
        self._record_sent(sent)
        replies = list(self.inner.send_and_receive(sent, timeout=timeout))
        self._record_replies(replies)
        return replies

    def _record_sent(self, messages: list[Message]) -> None:
        """The server's messages: those sharing one content (a strategy builds one record
        for every sampled client) recorded as one broadcast, one snapshot of the payload."""
        shared: dict[int, list[Message]] = {}
        for msg in messages:
            if msg.has_content():
                shared.setdefault(id(msg.content), []).append(msg)
        for group in shared.values():
            receivers = [self.party(m.metadata.dst_node_id) for m in group]
            self._record(group, SERVER, receivers)

    def _record_replies(self, replies: list[Message]) -> None:
        for msg in replies:
            if msg.has_content():  # an error reply carries no records
                self._record([msg], self.party(msg.metadata.src_node_id), [SERVER])

    def _record(self, messages: list[Message], sender: str, receivers: list[str]) -> None:
        """Messages of one content: its round (Flower's legacy workflows stamp it as the group
        id; the Message API's strategies send it as ``server-round``; a reply has the round of
        the request it answers), its parts, each message's size on the wire (its metadata's
        own, the content's once)."""
        content = messages[0].content
        if sender == SERVER:  # a reply's own config cannot move its round
            self.round = self._round(messages[0], content)
        content_bytes = recorddict_to_proto(content).ByteSize()
        totals = [message_nbytes(m, content_bytes) for m in messages]
        parts = self._parts(content, sender == SERVER)
        kind = messages[0].metadata.message_type
        rest = sum(nbytes for _, _, nbytes in parts[1:])
        for i, (part, payload, nbytes) in enumerate(parts):
            sizes = [t - rest for t in totals] if i == 0 else [nbytes] * len(totals)
            self.transcript.broadcast(self.round, sender, receivers, part, payload, sizes)
            self.message_types += [kind] * len(receivers)

    def _round(self, message: Message, content: RecordDict) -> int:
        group = message.metadata.group_id
        if group.isdigit():
            return int(group) - 1  # Flower counts from 1
        for config in content.config_records.values():
            if "server-round" in config:
                return int(config["server-round"]) - 1
        return self.round

    def _parts(self, content: RecordDict, sent: bool) -> list[tuple[str, Any, int]]:
        """(kind, payload, the bytes of its records) of what ``content`` carries: model
        arrays, SecAgg+'s record, metrics (the Message API's metric records; the legacy
        layout's example counts and its ``*.metrics`` config records)."""
        parts: list[tuple[str, Any, int]] = []
        arrays = [a for a in content.array_records.values() if len(a) > 0]
        if arrays:
            parts.append((MODEL_WEIGHTS, self._state(arrays[0]), 0))
        secagg = content.config_records.get(RECORD_KEY_CONFIGS)
        if secagg is not None:
            if sent:
                self.stage = str(secagg[Key.STAGE])
            kind = (SECAGG_SENT if sent else SECAGG_REPLY)[self.stage]
            nbytes = config_record_to_proto(secagg).ByteSize()
            parts.append((kind, {k: v for k, v in secagg.items() if k != Key.STAGE}, nbytes))
        metrics: dict[str, float] = {}
        metric_bytes = 0
        for name, c in content.config_records.items():
            if name.endswith(".metrics"):
                metrics.update(c)
                metric_bytes += config_record_to_proto(c).ByteSize()
        # after the legacy layout's own metrics: its example count (``fitres.num_examples``,
        # what FedAvg weighs by) is not overwritten by a client metric of the same name
        for m in content.metric_records.values():
            metrics.update(m)
            metric_bytes += metric_record_to_proto(m).ByteSize()
        if metrics:
            parts.append((METRICS, metrics, metric_bytes))
        return parts

    def _state(self, arrays: ArrayRecord) -> dict[str, torch.Tensor]:
        if self.names is None:
            return state_dict(arrays)
        parameters = compat.arrayrecord_to_parameters(arrays, keep_input=True)
        return legacy_state(parameters, self.names)


def message_nbytes(message: Message, content_nbytes: int) -> int:
    """``message_to_proto(message).ByteSize()`` without copying its content again: the
    message with its metadata alone, plus the content field (field 2: a one-byte tag, its
    length as a varint, the content)."""
    shell = ProtoMessage(metadata=metadata_to_proto(message.metadata)).ByteSize()
    return shell + 1 + _varint_nbytes(content_nbytes) + content_nbytes


def _varint_nbytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def legacy_state(parameters: Any, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """Flower's legacy Parameters (arrays by position) as the state dict whose keys are
    ``names``."""
    arrays = parameters_to_ndarrays(parameters)
    return {n: torch.as_tensor(np.asarray(a)) for n, a in zip(names, arrays, strict=True)}


def state_dict(arrays: ArrayRecord) -> dict[str, torch.Tensor]:
    """An ArrayRecord as the state dict it was built from."""
    return dict(arrays.to_torch_state_dict())
