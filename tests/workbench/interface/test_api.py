"""The Python API the CLI wraps: a suite from a mapping runs and resumes, the report is
written, components list their origins, and the accountant answers."""

from fgl_workbench.interface import api

RAW = {
    "name": "api",
    "reproducible": True,
    "seeds": [0],
    "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
    "partitions": [{"method": "metis", "num_clients": 3}],
    "targets": [{"name": "fedavg", "params": {"rounds": 2}}],
    "attacks": [{"name": "mia-threshold"}],
}


def test_run_resume_report_and_components(tmp_path):
    first = api.run_suite(RAW, tmp_path)
    assert (first.cells_run, first.cells_skipped) == (1, 0)
    assert api.run_suite(RAW, tmp_path).cells_skipped == 1
    assert api.build_report(tmp_path).name == "report.html"
    (row,) = api.ResultsStore(tmp_path).attacks()
    assert row.status == "ok"
    assert api.components("targets")["opfgl"] == "built-in"
    ledger = api.PrivacyLedger().record(api.Gaussian(sigma=2.0))
    assert 0 < api.epsilon(ledger, delta=1e-5).epsilon < 3
