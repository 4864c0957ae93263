import re

import pytest

from reports import build_report
from workbench.errors import WorkbenchError
from workbench.runner import run_suite
from workbench.suite import parse_suite


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    raw = {
        "name": "report <test>",
        "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
        "partitions": [{"method": "louvain", "num_clients": 3, "aux_fraction": 0.0}],
        "targets": [{"name": "fedavg", "params": {"rounds": 3}}],
        "attacks": [{"name": "mia-threshold"}, {"name": "mia-threshold", "params": {"hops": 2}}],
    }
    run_suite(parse_suite(raw), out, quiet=True)
    return out


def test_report_is_self_contained_and_shows_every_section(results):
    page = build_report(results).read_text()
    for heading in ("Setup", "Utility and cost", "Attacks"):
        assert f"<h2>{heading}</h2>" in page
    assert "report &lt;test&gt;" in page  # escaped
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 1
    assert "http://" not in page and "https://" not in page
    assert page.count("csbm/louvain-3/fedavg/seed0") >= 3
    assert "no DP" in page


def test_no_aux_pool_means_no_threshold(results):
    page = build_report(results).read_text()
    assert page.count("<td>n/a</td>") >= 2  # balanced accuracy and TPR@0.1% are n/a


def test_missing_store(tmp_path):
    with pytest.raises(WorkbenchError, match="no results store"):
        build_report(tmp_path)


def test_summary_across_seeds(tmp_path):
    from reports.summary import across_seeds
    from workbench.store import ResultsStore

    raw = {
        "name": "seeds",
        "seeds": [0, 1, 2],
        "datasets": [{"name": "csbm", "params": {"num_nodes": 300}}],
        "partitions": [{"method": "metis", "num_clients": 2}],
        "targets": [{"name": "fedavg", "params": {"rounds": 2}}],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    cells = ResultsStore(tmp_path).cells()
    (summary,) = across_seeds(cells)
    accs = [c.utility["accuracy"] for c in cells]
    assert summary.seeds == [0, 1, 2]
    assert summary.accuracy[0] == pytest.approx(sum(accs) / 3)
    assert summary.label == "csbm/metis-2/fedavg"
    assert "Across seeds" in build_report(tmp_path).read_text()


def test_sweep_configurations_get_distinct_labels(tmp_path):
    from reports.summary import across_seeds
    from workbench.store import ResultsStore

    raw = {
        "name": "sweep",
        "seeds": [0],
        "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
        "partitions": [{"method": "metis", "num_clients": 2}],
        "targets": [
            {"name": "fedavg", "params": {"rounds": 1, "lr": 0.01}},
            {"name": "fedavg", "params": {"rounds": 1, "lr": 0.1}},
        ],
    }
    run_suite(parse_suite(raw), tmp_path, quiet=True)
    labels = [s.label for s in across_seeds(ResultsStore(tmp_path).cells())]
    assert labels == [
        "csbm/metis-2/fedavg [target.params.lr=0.01]",
        "csbm/metis-2/fedavg [target.params.lr=0.1]",
    ]
