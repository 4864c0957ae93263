"""The sandbox's pieces that need no worker: a protected folder inside a readable one is
refused (Landlock only grants), and the runner is non-dumpable only while plug-ins run."""

import sys

import pytest

from fgl_workbench import sandbox


def test_a_protected_folder_inside_a_readable_one_is_refused(tmp_path):
    code, out = tmp_path / "code", tmp_path / "code" / "results"
    out.mkdir(parents=True)
    with pytest.raises(sandbox.SandboxError, match="lies inside"):
        sandbox.check_fenced_off([code], [out])
    sandbox.check_fenced_off([code], [tmp_path / "elsewhere"])


def test_the_runners_python_is_readable_and_nothing_else_of_it():
    readable = sandbox.readable_paths()
    assert any(p == sandbox.Path(sys.prefix) for p in readable)
    assert not any(p in (sandbox.Path("/"), sandbox.Path("/tmp")) for p in readable)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_the_runner_is_non_dumpable_while_a_plugin_runs():
    before = sandbox._prctl(sandbox.PR_GET_DUMPABLE, 0)
    with sandbox.undumpable():
        assert sandbox._prctl(sandbox.PR_GET_DUMPABLE, 0) == 0
    assert sandbox._prctl(sandbox.PR_GET_DUMPABLE, 0) == before
