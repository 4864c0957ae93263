"""The ClientApp: trains and evaluates the global GCN on this node's share of Cora.

Which share comes from the SuperNode's own configuration, ``context.node_config``:
``partition-id`` and ``num-partitions`` (``flower-supernode --node-config "partition-id=0
num-partitions=2"``; a simulation sets both itself). The run's settings (``local-epochs``,
``lr``) come from ``context.run_config``, the ``[tool.flwr.app.config]`` of pyproject.toml
with the overrides of ``flwr run --run-config``.
"""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_cora import task

app = ClientApp()


def _partition(context: Context) -> tuple[int, int, task.Partition]:
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    return partition_id, num_partitions, task.load_partition(partition_id, num_partitions)


def _model(msg: Message) -> task.GCN:
    model = task.GCN()
    arrays = msg.content["arrays"]
    assert isinstance(arrays, ArrayRecord)
    model.load_state_dict(arrays.to_torch_state_dict())
    return model


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local epochs from the global weights; replies with the new weights."""
    model = _model(msg)
    _, _, part = _partition(context)
    loss = task.train(
        model,
        part,
        epochs=int(context.run_config["local-epochs"]),
        lr=float(context.run_config["lr"]),
    )
    metrics = MetricRecord({"train-loss": loss, "num-examples": part.num_train})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """The global weights' loss and accuracy on this node's test nodes."""
    model = _model(msg)
    _, _, part = _partition(context)
    loss, accuracy = task.evaluate(model, part)
    metrics = MetricRecord(
        {"eval-loss": loss, "eval-accuracy": accuracy, "num-examples": part.num_test}
    )
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Tells the ServerApp which partition this node holds (it cannot see node_config)."""
    partition_id = int(context.node_config["partition-id"])
    num_partitions = int(context.node_config["num-partitions"])
    info = ConfigRecord({"partition-id": partition_id, "num-partitions": num_partitions})
    return Message(content=RecordDict({"node": info}), reply_to=msg)
