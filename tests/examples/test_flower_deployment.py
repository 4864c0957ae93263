"""examples/flower_cora through Flower's Deployment Engine on this machine: a SuperLink and two
SuperNodes as local processes, the app submitted with `flwr run`, as across machines but on
127.0.0.1 without TLS. Slow (about two minutes on two cores: every message to a SuperNode
starts a fresh ClientApp process, which imports torch and reads Cora).

The SuperLink, the SuperNodes and `flwr run` are the flower target's own deployment harness
(fgl_workbench.targets.flower.superlink), everything Flower writes kept in a temporary
FLWR_HOME and HOME."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fgl_workbench.targets.flower.superlink import (
    Connection,
    DeploymentError,
    local_deployment,
    run_app,
)

APP = Path(__file__).resolve().parents[2] / "examples" / "flower_cora"
RUN_TIMEOUT = 600  # seconds for `flwr run --stream`; about 120 s here

pytestmark = pytest.mark.slow


@pytest.fixture
def deployment(data_root: Path, tmp_path: Path) -> Iterator[Connection]:
    """The workbench's own local deployment (``fgl_workbench.targets.flower.superlink``)."""
    try:
        with local_deployment(tmp_path, num_nodes=2) as conn:
            yield conn
    except DeploymentError as exc:
        pytest.fail(str(exc))


def test_flower_cora_runs_on_a_superlink_and_two_supernodes(deployment, tmp_path):
    app = tmp_path / "flower_cora"  # a copy: `flwr run` may rewrite a legacy pyproject.toml
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    metrics_path = tmp_path / "metrics.json"

    start = time.perf_counter()
    try:  # `flwr run` exits 0 even when the run fails: run_app asks the SuperLink how it ended
        output = run_app(deployment, app, RUN_TIMEOUT, f'metrics-path="{metrics_path}"')
    except DeploymentError as exc:
        pytest.fail(str(exc))
    print(f"flwr run --stream, 2 SuperNodes, 3 rounds: {time.perf_counter() - start:.1f} s")

    assert "[ROUND 3/3]" in output and "Received 2 results and 0 failures" in output
    result = json.loads(metrics_path.read_text())
    assert result["num-server-rounds"] == 3
    assert sorted(result["evaluate"]) == ["1", "2", "3"]
    assert sorted(result["partitions"].values()) == [0, 1]  # node id -> partition, both nodes
    for metrics in [*result["train"].values(), *result["evaluate"].values()]:
        assert metrics["num-nodes"] == 2  # every round heard from both SuperNodes
    assert result["final-accuracy"] > 0.6  # chance is 1/7; about 0.79 here
