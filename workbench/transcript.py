"""Every message a federated method sends, recorded as it is sent.

Communication cost is read from here, never from formulas, and adversary views are cut from
it: an honest-but-curious server sees exactly the messages whose receiver is the server.
Payloads are kept for the final round only by default (``keep_payloads``; also the first and
last rounds, or all): the metadata of every message is always kept, but 100 rounds of full
weights would dominate memory."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch

SERVER = "server"
PUBLIC = "public"  # the receiver of a release anyone may read (e.g. published embeddings)

# Kinds named by the architecture note; methods may add their own strings.
MODEL_WEIGHTS = "model_weights"
UPDATE = "update"
GRADIENTS = "gradients"
CLASS_STATISTICS = (
    "class_statistics"  # fgl_workbench.targets.class_statistics.ClassStatistics payloads
)
NEIGHBOUR_FEATURES = "neighbour_features"  # other clients' node features relayed (FedGC)
CLASS_COUNTS = "class_counts"  # a client's training-label count per class (FedGC's Y')
RELIABILITY = "reliability"  # a per-class vector (FedTAD's class-wise reliability)
EMBEDDINGS = "embeddings"
GENERATIVE_MODEL = "generative_model"
CONDENSED_GRAPH = "condensed_graph"
CIPHERTEXT = "ciphertext"
PUBLIC_KEY = "public_key"  # key material anyone may hold (a CKKS public context, DH values)
MASKED_STATISTICS = "masked_statistics"  # pairwise-masked ring vectors (mask-based secure sum)
MASKED_WEIGHTS = "masked_weights"  # a model upload quantised and pairwise-masked (SecAgg+)
SECAGG_CONFIG = "secagg_config"  # a secure aggregation's parameters, sent to the clients
# the round's sum a secure aggregation unmasked, as the server holds it (a state dict, the
# weighted mean of the uploads): computed by the server, nothing on the wire (0 bytes)
AGGREGATE = "aggregate"
SURROGATE_GRAPH = "surrogate_graph"  # O-pFGL's global surrogate graph
METRICS = "metrics"  # a client's reported figures (losses, accuracies, counts): a dict of floats


def client(k: int) -> str:
    return f"client:{k}"


@dataclass(frozen=True)
class Message:
    round: int
    sender: str
    receiver: str
    kind: str
    nbytes: int
    payload: Any = None

    @property
    def direction(self) -> str:
        if self.receiver == SERVER:
            return "up"
        if self.sender == SERVER:
            return "down"
        return "peer"


def payload_nbytes(payload: Any) -> int:
    """Bytes on the wire: raw tensor/array bytes, summed through containers. Objects that know
    their serialised size (ciphertexts) expose ``nbytes``."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, np.ndarray | bytes | bytearray):
        return payload.nbytes if isinstance(payload, np.ndarray) else len(payload)
    if isinstance(payload, Mapping):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, Sequence) and not isinstance(payload, str):
        return sum(payload_nbytes(v) for v in payload)
    if hasattr(payload, "nbytes"):
        return int(payload.nbytes)
    raise TypeError(f"cannot size a payload of type {type(payload).__name__}")


# which rounds' payloads are kept (metadata is always kept): the first round's matter to attacks
# that want an untrained model's gradients, the last round's to those reading the final state;
# set-up phases recorded before round 0 (negative rounds) are kept with the first round
KeepPayloads = Literal["all", "last_round", "first_and_last", "none"]


class Transcript:
    def __init__(
        self, keep_payloads: KeepPayloads = "last_round", always_keep: Collection[str] = ()
    ) -> None:
        """``always_keep``: kinds whose payloads are kept every round whatever
        ``keep_payloads`` says (small ones attacks read in full, e.g. exchanged embeddings)."""
        self.keep_payloads = keep_payloads
        self.always_keep = frozenset(always_keep)
        self._messages: list[Message] = []
        # messages before this index have had their payloads kept or stripped for good: each
        # round change looks only at the rounds since, so recording R rounds stays O(R·C)
        self._settled = 0

    def send(
        self,
        round: int,
        sender: str,
        receiver: str,
        kind: str,
        payload: Any,
        nbytes: int | None = None,
    ) -> Message:
        """Record one message. Tensors are detached and copied, so later training cannot
        change what was observed."""
        return self.broadcast(round, sender, [receiver], kind, payload, nbytes)[0]

    def broadcast(
        self,
        round: int,
        sender: str,
        receivers: list[str],
        kind: str,
        payload: Any,
        nbytes: int | Sequence[int] | None = None,
    ) -> list[Message]:
        """Record the same payload sent to each receiver: one message (and its bytes) per
        receiver, one shared snapshot of the payload. ``nbytes``: the size measured on the
        wire where a framework serialises the payload (Flower's protobuf), one for all
        receivers or one each; otherwise the payload's raw bytes (``payload_nbytes``)."""
        stored = _snapshot(payload) if self.keep_payloads != "none" else None
        nbytes = payload_nbytes(payload) if nbytes is None else nbytes
        sizes = [nbytes] * len(receivers) if isinstance(nbytes, int) else list(nbytes)
        new_round = bool(self._messages) and self._messages[-1].round != round
        if new_round and self.keep_payloads in ("last_round", "first_and_last"):
            # set-up phases before round 0 (negative rounds) count as part of the first round
            first = (
                max(self._messages[0].round, 0) if self.keep_payloads == "first_and_last" else None
            )
            self._messages[self._settled :] = [
                m
                if (first is not None and m.round <= first) or m.kind in self.always_keep
                else _strip(m)
                for m in self._messages[self._settled :]
            ]
            self._settled = len(self._messages)
        msgs = [
            Message(round, sender, r, kind, n, stored)
            for r, n in zip(receivers, sizes, strict=True)
        ]
        self._messages.extend(msgs)
        return msgs

    def rename(self, names: Mapping[str, str]) -> None:
        """Rename parties once their names are known (a framework's node ids to the
        workbench's clients, learnt only after the run): metadata only, payloads untouched."""
        self._messages = [
            replace(
                m, sender=names.get(m.sender, m.sender), receiver=names.get(m.receiver, m.receiver)
            )
            for m in self._messages
        ]

    def absorb(self, other: Transcript, round_offset: int) -> None:
        """Append the messages of a phase recorded on its own (e.g. a pre-training run), its
        rounds shifted by ``round_offset`` so the rounds stay in order."""
        self._messages.extend(
            Message(m.round + round_offset, m.sender, m.receiver, m.kind, m.nbytes, m.payload)
            for m in other.messages
        )

    @classmethod
    def of(cls, messages: Collection[Message]) -> Transcript:
        """A transcript holding exactly ``messages`` (one read back from a snapshot)."""
        out = cls("all")
        out._messages = list(messages)
        out._settled = len(out._messages)
        return out

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    def received_by(self, party: str) -> tuple[Message, ...]:
        return tuple(m for m in self._messages if m.receiver == party)

    def total_bytes(self) -> dict[str, int]:
        out = {"up": 0, "down": 0, "peer": 0}
        for m in self._messages:
            out[m.direction] += m.nbytes
        return out

    def bytes_per_round(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = defaultdict(lambda: {"up": 0, "down": 0, "peer": 0})
        for m in self._messages:
            out[m.round][m.direction] += m.nbytes
        return dict(out)


def _snapshot(payload: Any) -> Any:
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, Mapping):
        return {k: _snapshot(v) for k, v in payload.items()}
    if isinstance(payload, list | tuple):
        return type(payload)(_snapshot(v) for v in payload)
    return payload


def _strip(m: Message) -> Message:
    if m.payload is None:
        return m
    return Message(m.round, m.sender, m.receiver, m.kind, m.nbytes, None)
