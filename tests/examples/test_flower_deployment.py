"""examples/flower_cora through Flower's Deployment Engine on this machine: a SuperLink and two
SuperNodes as local processes, the app submitted with `flwr run`, as across machines but on
127.0.0.1 without TLS. Slow (about two minutes on two cores: every message to a SuperNode
starts a fresh ClientApp process, which imports torch and reads Cora).

Flower 1.42 serves the SuperLink's Fleet, Control and ServerApp APIs over HTTP on one port
(--host/--port); `flwr run APP CONNECTION` reads the connection from $FLWR_HOME/config.toml.
Everything Flower writes (config, installed FABs) goes to a temporary FLWR_HOME and HOME."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "examples" / "flower_cora"
BIN = Path(sys.executable).parent
CONNECTION = "test-deployment"
RUN_TIMEOUT = 600  # seconds for `flwr run --stream`; about 120 s here

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return f"--- {path.name}\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class Deployment:
    env: dict[str, str]
    address: str
    logs: list[Path]

    def flwr(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "flwr"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def logs_tail(self) -> str:
        return "\n".join(_tail(path) for path in self.logs)


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # its own session, so that stopping it stops the processes it starts
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)


def _wait_healthy(address: str, superlink: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if superlink.poll() is not None:
            pytest.fail(f"flower-superlink exited with {superlink.returncode}\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://{address}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"flower-superlink not healthy on {address} after 60 s\n{_tail(log)}")


@pytest.fixture
def deployment(data_root: Path, tmp_path: Path) -> Iterator[Deployment]:
    home = tmp_path / "flwr-home"
    home.mkdir()
    (tmp_path / "home").mkdir()
    port = _free_port()
    address = f"127.0.0.1:{port}"
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "{address}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # flower-superexec & co.
        "HOME": str(tmp_path / "home"),
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "OMP_NUM_THREADS": "1",
        "FGLWB_DATA": str(data_root),
        "FGLWB_CACHE": os.environ["FGLWB_CACHE"],  # the session's, from tests/conftest.py
    }
    env.pop("PYTHONPATH", None)
    processes: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / "superlink.log"]
    try:
        superlink = _start(
            [
                str(BIN / "flower-superlink"),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                # its default runs `uv sync` against an index for every run: offline here
                "--disable-runtime-dependency-installation",
            ],
            env,
            logs[0],
        )
        processes.append(superlink)
        _wait_healthy(address, superlink, logs[0])
        for partition in range(2):
            logs.append(tmp_path / f"supernode-{partition}.log")
            node = [
                str(BIN / "flower-supernode"),
                "--insecure",
                "--superlink",
                address,
                "--host",
                "127.0.0.1",
                "--port",
                str(_free_port()),  # the SuperNode's own ClientApp-facing API
                "--node-config",
                f"partition-id={partition} num-partitions=2",
            ]
            processes.append(_start(node, env, logs[-1]))
        yield Deployment(env, address, logs)
    finally:
        for process in reversed(processes):
            _stop(process)


def test_flower_cora_runs_on_a_superlink_and_two_supernodes(deployment, tmp_path):
    app = tmp_path / "flower_cora"  # a copy: `flwr run` may rewrite a legacy pyproject.toml
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    metrics_path = tmp_path / "metrics.json"

    start = time.perf_counter()
    try:
        run = deployment.flwr(
            "run",
            str(app),
            CONNECTION,
            "--stream",
            "--run-config",
            f'metrics-path="{metrics_path}"',
            timeout=RUN_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"flwr run took over {RUN_TIMEOUT} s\n{deployment.logs_tail()}")
    elapsed = time.perf_counter() - start
    output = run.stdout + run.stderr
    print(f"flwr run --stream, 2 SuperNodes, 3 rounds: {elapsed:.1f} s")
    assert run.returncode == 0, f"{output}\n{deployment.logs_tail()}"
    found = re.search(r"Successfully started run (\d+)", output)
    assert found, output

    # `flwr run` exits 0 even when the run fails: ask the SuperLink how it ended
    listed = deployment.flwr(
        "ls", CONNECTION, "--run-id", found.group(1), "--format", "json", timeout=60
    )
    runs = json.loads(listed.stdout)["runs"]
    assert runs[0]["status"] == "finished:completed", f"{output}\n{deployment.logs_tail()}"

    assert "[ROUND 3/3]" in output and "Received 2 results and 0 failures" in output
    result = json.loads(metrics_path.read_text())
    assert result["num-server-rounds"] == 3
    assert sorted(result["evaluate"]) == ["1", "2", "3"]
    assert sorted(result["partitions"].values()) == [0, 1]  # node id -> partition, both nodes
    for metrics in [*result["train"].values(), *result["evaluate"].values()]:
        assert metrics["num-nodes"] == 2  # every round heard from both SuperNodes
    assert result["final-accuracy"] > 0.6  # chance is 1/7; about 0.79 here
