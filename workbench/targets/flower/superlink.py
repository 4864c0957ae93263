"""Flower's Deployment Engine driven from Python: the ``flwr`` CLI pointed at a SuperLink
through a private ``FLWR_HOME``, ``flwr run`` with its outcome checked, and, for one machine
and the tests, a SuperLink and SuperNodes started as local processes on 127.0.0.1 without TLS.

Flower 1.42 serves the SuperLink's Fleet, Control and ServerApp APIs over HTTP on one port
(``--host``/``--port``); ``flwr run APP CONNECTION`` reads the connection from
``$FLWR_HOME/config.toml``. Everything Flower writes (that config, installed FABs) goes to a
temporary ``FLWR_HOME`` and ``HOME``. ``flwr run`` exits 0 even when the run fails: the run's
status is asked of the SuperLink (``flwr ls``) afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fgl_workbench.data.catalog import cache_root, data_root
from fgl_workbench.errors import WorkbenchError

BIN = Path(sys.executable).parent  # flwr, flower-superlink & co. of this environment
CONNECTION = "fglwb"  # the connection's name in the private config.toml
COMPLETED = "finished:completed"


class DeploymentError(WorkbenchError):
    """A deployment did not start, or its run did not complete (the logs' tails say why)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return f"--- {path.name}\n" + "\n".join(text.splitlines()[-lines:])


@dataclass
class Connection:
    """The ``flwr`` CLI's view of one SuperLink; ``logs``: the local processes' logs."""

    env: dict[str, str]
    address: str
    logs: list[Path]

    def flwr(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["flwr", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def logs_tail(self) -> str:
        return "\n".join(log_tail(path) for path in self.logs)


def connect(workdir: Path, address: str, root_certificates: str | None = None) -> Connection:
    """A ``flwr`` CLI configured (in ``workdir``) to reach the SuperLink at ``address``:
    over TLS checked against ``root_certificates``, else insecure."""
    home = workdir / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    scripts = flower_scripts(workdir / "bin")
    (workdir / "home").mkdir(exist_ok=True)
    security = (
        f"root-certificates = {json.dumps(str(Path(root_certificates).resolve()))}\n"
        if root_certificates
        else "insecure = true\n"
    )
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "{address}"\n{security}'
    )
    env = {
        **os.environ,
        "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(workdir / "home"),
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        # local SuperNodes read the datasets this process reads, processed once
        "FGLWB_DATA": str(data_root()),
        "FGLWB_CACHE": str(cache_root()),
    }
    return Connection(env, address, [])


def flower_scripts(folder: Path) -> Path:
    """A folder of Flower's commands (``flwr``, ``flower-superlink``, the ``flwr-serverapp``
    and ``flwr-clientapp`` its SuperExecs start by name, ...) each run by this interpreter, so
    every process of the deployment imports this environment's packages whatever the
    scripts' ``#!`` line says (a copied virtual environment's names another)."""
    folder.mkdir(parents=True, exist_ok=True)
    for script in BIN.iterdir():
        if script.name.startswith(("flwr", "flower-")):
            wrapper = folder / script.name
            wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
            wrapper.chmod(0o755)
    return folder


def run_app(conn: Connection, app: Path, timeout: float, *run_config: str) -> str:
    """``flwr run --stream`` of the app folder ``app`` (``run_config``: its ``--run-config``
    overrides); its output once the SuperLink says the run completed, else a
    ``DeploymentError`` with the output's and logs' tails."""
    overrides = [arg for value in run_config for arg in ("--run-config", value)]
    try:
        run = conn.flwr("run", str(app), CONNECTION, "--stream", *overrides, timeout=timeout)
        output = run.stdout + run.stderr
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        found = re.search(r"Successfully started run (\d+)", output)
        if found:
            with contextlib.suppress(subprocess.TimeoutExpired):
                conn.flwr("stop", found.group(1), CONNECTION, timeout=60)
        raise DeploymentError(
            f"flwr run took over {timeout:g} s (deployment.run_timeout)\n"
            f"{_tail(output)}\n{conn.logs_tail()}"
        ) from None
    found = re.search(r"Successfully started run (\d+)", output)
    if run.returncode != 0 or not found:
        raise DeploymentError(
            f"flwr run could not start the run (exit {run.returncode})\n"
            f"{_tail(output)}\n{conn.logs_tail()}"
        )
    status = run_status(conn, found.group(1))
    if status != COMPLETED:
        raise DeploymentError(
            f"run {found.group(1)} ended {status}, not {COMPLETED}\n"
            f"{_tail(output)}\n{conn.logs_tail()}"
        )
    return output


def run_status(conn: Connection, run_id: str) -> str:
    """How the SuperLink says run ``run_id`` ended (``flwr ls``)."""
    listed = conn.flwr("ls", CONNECTION, "--run-id", run_id, "--format", "json", timeout=60)
    try:
        return str(json.loads(listed.stdout)["runs"][0]["status"])
    except (ValueError, KeyError, IndexError, TypeError):
        return f"unknown (flwr ls said: {_tail(listed.stdout + listed.stderr, 5)})"


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


def _tail(text: str, lines: int = 40) -> str:
    return "--- flwr run\n" + "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def local_deployment(
    workdir: Path, num_nodes: int, connect_timeout: float = 120.0
) -> Iterator[Connection]:
    """A SuperLink and ``num_nodes`` SuperNodes (node k with ``partition-id=k
    num-partitions=num_nodes``) as processes on 127.0.0.1 without TLS, stopped on exit; the
    SuperLink installs no FAB dependencies (its default, ``uv sync`` per run, needs an
    index): the apps run in this environment."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    conn = connect(workdir, address)
    processes: list[subprocess.Popen[bytes]] = []
    try:
        conn.logs.append(workdir / "superlink.log")
        superlink = _start(
            [
                "flower-superlink",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            ],
            conn.env,
            conn.logs[0],
        )
        processes.append(superlink)
        _wait_healthy(address, superlink, conn.logs[0], connect_timeout)
        for k in range(num_nodes):
            conn.logs.append(workdir / f"supernode-{k}.log")
            node = [
                "flower-supernode",
                "--insecure",
                "--superlink",
                address,
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),  # the SuperNode's own ClientApp-facing API
                "--node-config",
                f"partition-id={k} num-partitions={num_nodes}",
            ]
            processes.append(_start(node, conn.env, conn.logs[-1]))
        yield conn
    finally:
        for process in reversed(processes):
            _stop(process)


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


def _wait_healthy(
    address: str, superlink: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if superlink.poll() is not None:
            raise DeploymentError(
                f"flower-superlink exited with {superlink.returncode}\n{log_tail(log)}"
            )
        try:
            with urllib.request.urlopen(f"http://{address}/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise DeploymentError(
        f"flower-superlink not healthy on {address} after {timeout:g} s "
        f"(deployment.connect_timeout)\n{log_tail(log)}"
    )
