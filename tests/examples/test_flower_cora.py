"""examples/flower_cora, a Flower app written the way a Flower user writes one: its split, and
three rounds of its ServerApp and ClientApp in Flower's simulation (Ray, in this process).

`run_simulation` hands the apps an empty run config (the pyproject's [tool.flwr.app.config]
is read only by `flwr run`), so the apps run inside thin wrappers that give them a Context
carrying that config: the app's own `main(grid, context)` and message handlers, unchanged."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from flower_cora import client_app, server_app, task
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.common.config import get_fused_config_from_dir
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

APP = Path(__file__).resolve().parents[2] / "examples" / "flower_cora"


def test_the_split_is_disjoint_covering_and_fixed(data_root):
    parts = [task.load_partition(k, 3) for k in range(3)]
    nodes = torch.cat([p.nodes for p in parts])
    assert nodes.numel() == nodes.unique().numel() == 2708
    for k, part in enumerate(parts):
        again = task.load_partition(k, 3)
        assert torch.equal(part.nodes, again.nodes)
        assert torch.equal(part.train_mask, again.train_mask)
        assert torch.equal(part.train_mask, ~part.test_mask)
        assert part.num_train == int(0.6 * part.nodes.numel())
        # the induced subgraph: renumbered edges among the client's own nodes only
        assert part.edge_index.max() < part.nodes.numel()
        assert part.x.shape == (part.nodes.numel(), task.NUM_FEATURES)
    assert int(parts[0].y.max()) < task.NUM_CLASSES


def _with_config(fn: Callable[[Message, Context], Message], config: dict) -> Callable:
    def handler(msg: Message, context: Context) -> Message:
        given = Context(
            run_id=context.run_id,
            node_id=context.node_id,
            node_config=context.node_config,
            state=context.state,
            run_config=dict(config),
        )
        return fn(msg, given)

    return handler


@pytest.fixture
def restored_environ() -> Iterator[None]:
    """Flower's Ray backend writes this process's whole sys.path into os.environ's PYTHONPATH
    (for its workers), and importing ray sets RAY_* variables: later tests' subprocesses must
    not inherit them."""
    saved = dict(os.environ)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.slow  # Ray's start and stop are 17-20 s of it; the recorded test runs the app inline
def test_three_simulated_rounds(data_root, tmp_path, restored_environ):
    metrics_path = tmp_path / "metrics.json"
    config = get_fused_config_from_dir(APP, {"metrics-path": str(metrics_path)})
    assert config["num-server-rounds"] == 3

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        given = Context(context.run_id, context.node_id, {}, context.state, dict(config))
        server_app.main(grid, given)

    client = ClientApp()
    client.train()(_with_config(client_app.train, config))
    client.evaluate()(_with_config(client_app.evaluate, config))
    client.query()(_with_config(client_app.query, config))

    start = time.perf_counter()
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=3,
        backend_config={"client_resources": {"num_cpus": 1}},
    )
    print(f"run_simulation, 3 nodes, 3 rounds: {time.perf_counter() - start:.1f} s")

    result = json.loads(metrics_path.read_text())
    assert sorted(result["partitions"].values()) == [0, 1, 2]
    assert sorted(result["evaluate"]) == ["1", "2", "3"]
    for metrics in [*result["train"].values(), *result["evaluate"].values()]:
        assert metrics["num-nodes"] == 3  # every node answered every round
    assert result["evaluate"]["3"]["total-examples"] == 2708 - 3 * 541  # the test nodes
    assert result["final-accuracy"] > 0.6  # chance is 1/7; about 0.78 here
