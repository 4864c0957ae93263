"""The ServerApp: FedAvg of the GCN over the connected SuperNodes.

``main(grid, context)`` is a plain function (``@app.main()`` registers it and returns it
unchanged), so code around the app can call ``main(other_grid, context)`` with a Grid of its
own. It asks every node which partition it holds (a ``query`` message: the SuperLink does not
know the SuperNodes' ``node_config``), runs ``FedAvg.start``, and, when the run config's
``metrics-path`` is set, writes the run's metrics there as JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
)
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from flower_cora import task

app = ServerApp()


def aggregate(records: list[RecordDict], weight_key: str) -> MetricRecord:
    """Example-weighted mean of each metric, plus how many nodes replied and their examples.

    The count lets a reader see that a round heard from every node: FedAvg carries on, and
    only logs, when some replies are errors.
    """
    metrics = [next(iter(r.metric_records.values())) for r in records]
    weights = [_scalar(m[weight_key]) for m in metrics]
    total = sum(weights)
    out = MetricRecord({"num-nodes": len(metrics), "total-examples": int(total)})
    for key in metrics[0]:
        if key != weight_key:
            values = [_scalar(m[key]) for m in metrics]
            out[key] = sum(w * v for w, v in zip(weights, values, strict=True)) / total
    return out


def _scalar(value: MetricRecordValues) -> float:
    if isinstance(value, list):
        raise TypeError("aggregate averages scalar metrics only")
    return float(value)


def partitions(grid: Grid, min_nodes: int, timeout: float) -> dict[int, int]:
    """Node id -> partition id, asked of each node once ``min_nodes`` are connected."""
    while len(list(grid.get_node_ids())) < min_nodes:
        time.sleep(1.0)
    messages = [
        Message(RecordDict(), dst_node_id=node_id, message_type=MessageType.QUERY)
        for node_id in grid.get_node_ids()
    ]
    held: dict[int, int] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if not reply.has_error():
            info = reply.content["node"]
            assert isinstance(info, ConfigRecord)
            partition_id = info["partition-id"]
            assert isinstance(partition_id, int)
            held[reply.metadata.src_node_id] = partition_id
    return held


def _by_round(history: dict[int, MetricRecord]) -> dict[str, dict[str, Any]]:
    return {str(r): dict(m) for r, m in sorted(history.items())}


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Runs ``num-server-rounds`` rounds of FedAvg on at least ``min-nodes`` nodes."""
    config = context.run_config
    num_rounds = int(config["num-server-rounds"])
    min_nodes = int(config["min-nodes"])
    timeout = float(config["round-timeout"])

    strategy = FedAvg(
        min_train_nodes=min_nodes,
        min_evaluate_nodes=min_nodes,
        min_available_nodes=min_nodes,
        train_metrics_aggr_fn=aggregate,
        evaluate_metrics_aggr_fn=aggregate,
    )
    initial = ArrayRecord(task.initial_model().state_dict())
    held = partitions(grid, min_nodes, timeout)
    result = strategy.start(
        grid=grid, initial_arrays=initial, num_rounds=num_rounds, timeout=timeout
    )

    path = str(config.get("metrics-path", ""))
    if path:
        evaluate = _by_round(result.evaluate_metrics_clientapp)
        final = evaluate[max(evaluate, key=int)] if evaluate else {}
        report = {
            "num-server-rounds": num_rounds,
            "partitions": {str(node): part for node, part in sorted(held.items())},
            "train": _by_round(result.train_metrics_clientapp),
            "evaluate": evaluate,
            "final-accuracy": final.get("eval-accuracy"),
        }
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=2) + "\n")
