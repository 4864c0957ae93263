"""The recording grid's sizes are the serialised protobuf's, counted without a copy."""

import pytest
import torch

pytest.importorskip("flwr")
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.common.serde import (
    message_to_proto,  # noqa: E402
    recorddict_to_proto,  # noqa: E402
)
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fgl_workbench.targets.flower.grid import message_nbytes  # noqa: E402


@pytest.mark.parametrize("size", [0, 3, 40, 5000, 200_000])
def test_a_messages_size_is_its_protobufs(size):
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    content = RecordDict(
        {
            "arrays": ArrayRecord({"w": torch.arange(size, dtype=torch.float32)}),
            "metrics": MetricRecord({"num-examples": 3.0}),
            "config": ConfigRecord({"server-round": 2}),
        }
    )
    for node in (2, 2**40 + 7):
        msg = Message(content, node, "train")
        expected = message_to_proto(msg).ByteSize()
        assert message_nbytes(msg, recorddict_to_proto(content).ByteSize()) == expected
