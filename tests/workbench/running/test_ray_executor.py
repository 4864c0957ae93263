"""The Ray executor on a local instance with 2 CPUs: the same rows as the serial executor,
resumable, and a task whose worker is killed is retried."""

import os
import signal
import sys
import threading
import time

import pytest
from test_runner import RAW, rows

from fgl_workbench.errors import ConfigError
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import parse_suite

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]'")


def test_ray_executor_equals_serial_and_resumes(tmp_path):
    suite = parse_suite({**RAW, "seeds": [0, 1, 2]})
    on_ray = run_suite(suite, tmp_path / "ray", quiet=True, jobs=2, executor="ray")
    assert (on_ray.cells_run, on_ray.cells_skipped) == (3, 0)
    assert not ray.is_initialized()  # the private instance is shut down
    run_suite(suite, tmp_path / "serial", quiet=True)
    assert rows(tmp_path / "ray") == rows(tmp_path / "serial")
    again = run_suite(suite, tmp_path / "ray", quiet=True, jobs=2, executor="ray")
    assert again.cells_run == 0


@pytest.mark.slow  # 1-4 minutes on two cores; the default run keeps this module's shorter cases
def test_a_killed_ray_worker_is_retried_and_nothing_changes(tmp_path):
    """SIGKILL the worker process running a cell: Ray resubmits the task, and the rows equal
    the serial executor's."""
    psutil = pytest.importorskip("psutil")
    raw = {**RAW, "seeds": [0, 1], "targets": [{"name": "fedavg", "params": {"rounds": 60}}]}
    suite = parse_suite(raw)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    killed: list[int] = []

    def kill_first_cell_worker() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for proc in psutil.process_iter(["cmdline"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if cmd.startswith("ray::_cell"):
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.append(proc.pid)
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_first_cell_worker)
    killer.start()
    try:
        summary = run_suite(suite, tmp_path / "ray", quiet=True, executor="ray")
    finally:
        killer.join()
        ray.shutdown()
    assert killed, "no cell task was seen running"
    assert summary.cells_run == 2
    run_suite(suite, tmp_path / "serial", quiet=True)
    assert rows(tmp_path / "ray") == rows(tmp_path / "serial")


def test_without_ray_the_error_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ConfigError, match=r"fgl-workbench\[ray\]"):
        run_suite(parse_suite(RAW), tmp_path, quiet=True, executor="ray")


def test_unknown_executor_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--executor"):
        run_suite(parse_suite(RAW), tmp_path, quiet=True, executor="threads")


def test_auto_without_a_cluster_names_the_address(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match="--address auto: no Ray cluster reachable"):
        run_suite(parse_suite(RAW), tmp_path, quiet=True, executor="ray", address="auto")
