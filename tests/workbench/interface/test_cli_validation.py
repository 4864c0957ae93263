"""Bad arguments end in one line naming the flag, never a traceback: output paths of
`report` and `export`, a Ray that cannot start, and a suite too large to expand in
`--dry-run` (issue 43's fuzz findings)."""

import sys
import time
import types

import pytest

from fgl_workbench.interface.cli import main
from fgl_workbench.running.runner import run_suite
from fgl_workbench.running.suite import MAX_CELLS, parse_suite

SMALL = {
    "name": "small",
    "reproducible": True,
    "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
    "partitions": [{"method": "metis", "num_clients": 2}],
    "targets": [{"name": "fedavg", "params": {"rounds": 1}}],
}
SUITE = (
    "name: s\ndatasets: [{name: csbm, params: {num_nodes: 200}}]\n"
    "partitions: [{method: metis, num_clients: 2}]\n"
    "targets: [{name: fedavg, params: {rounds: 1}}]\n"
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("small") / "run"
    run_suite(parse_suite(SMALL), out, quiet=True)
    return out


def one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_report_out_that_is_a_file_is_one_line(results, tmp_path, capsys):
    target = tmp_path / "report.txt"
    target.write_text("x")
    err = one_line_error(capsys, ["report", str(results), "--out", str(target)])
    assert f"--out {target}: expected a folder, got a file" in err


def test_report_out_below_a_file_is_one_line(results, tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    target = tmp_path / "plain" / "report"
    err = one_line_error(capsys, ["report", str(results), "--out", str(target)])
    assert f"--out: {tmp_path / 'plain'} is a file, not a folder" in err


def test_report_tradeoff_png_that_is_a_folder_is_one_line(results, tmp_path, capsys):
    err = one_line_error(capsys, ["report", str(results), "--tradeoff-png", str(tmp_path)])
    assert f"--tradeoff-png {tmp_path}: expected a file to write, got a folder" in err


def test_export_output_that_is_a_folder_is_one_line(results, tmp_path, capsys):
    err = one_line_error(capsys, ["export", str(results), "--output", str(tmp_path)])
    assert f"--output {tmp_path}: expected a file to write, got a folder" in err


def test_export_output_below_a_file_is_one_line(results, tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    path = tmp_path / "plain" / "sub" / "r.csv"
    err = one_line_error(capsys, ["export", str(results), "--output", str(path)])
    assert f"--output: {tmp_path / 'plain'} is a file, not a folder" in err


def test_export_output_into_a_new_folder_still_works(results, tmp_path, capsys):
    path = tmp_path / "new" / "r.csv"
    assert main(["export", str(results), "--output", str(path)]) == 0
    assert path.read_text().startswith("cell_id,")  # the parent was made, as before


def test_a_ray_that_cannot_start_is_one_line(tmp_path, capsys, monkeypatch):
    def init(**_):
        raise RuntimeError("Failed to start the GCS server\n  (long log follows)")

    broken = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", broken)
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    argv = ["run", str(suite), "--out", str(tmp_path / "o"), "--executor", "ray", "--quiet"]
    err = one_line_error(capsys, argv)
    assert "--executor ray: Ray failed to start at --address local (RuntimeError: Failed" in err


def test_a_million_cell_dry_run_fails_fast(tmp_path, capsys):
    suite = tmp_path / "s.yaml"
    sweep = ", ".join(str(r) for r in range(1, 1001))
    suite.write_text(
        SUITE.replace("targets:", f"seeds: {list(range(1000))}\ntargets:").replace(
            "params: {rounds: 1}}", f"sweep: {{params.rounds: [{sweep}]}}}}"
        )
    )
    start = time.perf_counter()
    assert main(["run", str(suite), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert time.perf_counter() - start < 2.0
    assert f"over the cap of {MAX_CELLS}" in capsys.readouterr().err


def bomb(levels: int) -> str:
    """One YAML value of 10^(levels + 1) ones in a few hundred bytes: each level's anchor is
    defined in place and aliased nine more times."""
    text = "&a0 [" + ", ".join(["1"] * 10) + "]"
    for i in range(1, levels + 1):
        text = f"&a{i} [{text}, {', '.join([f'*a{i - 1}'] * 9)}]"
    return text


@pytest.mark.parametrize(
    "content, expected",
    [
        (bytes(range(256)), "is not valid YAML"),
        (b"sigma: " + b"9" * 5000 + b"\n", "is not a YAML text"),
        (b"1: 2\nsigma: 1\n", "unknown keys ['1']"),
        (b"mechanism: {a: 1}\n", "mechanism: expected a number, a range or a list, got a mapping"),
        (
            f"mechanism: gaussian\nsigma: {bomb(5)}\n".encode(),
            "sigma: expected a number, a range or a flat",
        ),
        (b"sigma: [" + b"1," * 20_000 + b"1]\n", "flat list of at most 10,000 numbers"),
        (b"#" * (2 << 20), "over the cap of 1048576 bytes"),
    ],
)
def test_a_hostile_epsilon_grid_file_is_one_line(tmp_path, capsys, content, expected):
    grid = tmp_path / "grid.yaml"
    grid.write_bytes(content)
    assert expected in one_line_error(capsys, ["epsilon", "--grid", str(grid)])


def test_a_comma_list_past_the_cap_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a grid would be written, were it computed
    sigmas = ",".join(["1"] * 20_000)
    err = one_line_error(capsys, ["epsilon", "--mechanism", "gaussian", "--sigma", sigmas])
    assert "--sigma: 20,000 values; at most 10,000" in err


@pytest.mark.parametrize(
    "argv",
    [["epsilon", "--grid", "\n"], ["attack", "x", "--attack", "\r"], ["report", "a\x1b[2Jb"]],
)
def test_an_argument_with_a_control_character_is_one_line(capsys, argv):
    """Found by the fuzz test: a newline or escape echoed back broke or rewrote the line."""
    err = one_line_error(capsys, argv)
    assert "control characters are not accepted" in err and "\x1b" not in err
