"""`--trust-plugins` on `run` and `attack`: without a sandbox a plug-in attack is refused in
one line; trusted, it runs and the report marks its row."""

from pathlib import Path

import yaml

from fgl_workbench import sandbox
from fgl_workbench.attacks.plugins import TRUSTED
from fgl_workbench.interface import api
from fgl_workbench.interface.cli import main
from fgl_workbench.storage.store import TRUSTED_MARK

RUNNING = Path(__file__).resolve().parents[1] / "running"  # snoop_attack.py, a plug-in
SUITE = {
    "name": "plugins",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "targets": [{"name": "fedavg", "params": {"rounds": 3}}],
    "attacks": [{"name": "snoop_attack:Snoop"}],
}


def test_without_a_sandbox_run_and_attack_need_trust_plugins(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "mechanism", lambda: None)
    monkeypatch.syspath_prepend(str(RUNNING))
    suite, out = tmp_path / "suite.yaml", str(tmp_path / "out")
    suite.write_text(yaml.safe_dump(SUITE))
    assert main(["run", str(suite), "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "attacks[0]." in err  # the heading, the entry refused
    # (its name where it is described now, its params where it was described before)
    assert "--trust-plugins" in err
    assert main(["run", str(suite), "--out", out, "--quiet", "--trust-plugins"]) == 0
    report = (Path(out) / "report.html").read_text()
    assert f"snoop_attack:Snoop [{TRUSTED_MARK}]" in report
    assert "could read everything the user can" in report
    assert list(api.results(out)["fence"]) == [TRUSTED]  # export's column
    capsys.readouterr()
    assert main(["report", out]) == 0  # the terminal's summary says what the mark means too
    assert "could read everything the user can" in capsys.readouterr().out
    assert main(["attack", out, "--attack", "snoop_attack:Snoop"]) == 2
    assert "--trust-plugins" in capsys.readouterr().err
    assert main(["attack", out, "--attack", "snoop_attack:Snoop", "--trust-plugins"]) == 0
