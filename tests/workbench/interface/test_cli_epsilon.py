import csv
import json
import math
import subprocess
import sys

import pytest

from fgl_workbench.interface.cli import main

SGM = "--mechanism subsampled-gaussian"


def run(capsys, line: str, *extra: str):
    """Run ``fgl-workbench epsilon`` with a command line (split on spaces) plus extra args."""
    code = main(["epsilon", *line.split(), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_subsampled_gaussian_prints_epsilon_and_order(capsys):
    code, out, _ = run(capsys, SGM + " --sigma 1.1 --q 0.01 --steps 1000 --delta 1e-5")
    assert code == 0
    assert "epsilon = 1.71" in out and "best order" in out and "PLD" not in out
    # with --pld, beside it, labelled, the tighter PLD figure (dp_accounting's pessimistic
    # estimate)
    code, out, _ = run(capsys, SGM + " --sigma 1.1 --q 0.01 --steps 1000 --delta 1e-5 --pld")
    assert "PLD accountant (dp_accounting, pessimistic): epsilon = 1.51" in out


@pytest.mark.parametrize("pld", [False, True])
def test_epsilon_imports_dp_accounting_only_when_pld_is_asked_for(pld):
    """Importing dp_accounting (scipy.signal, stats, optimize) takes about a second: the
    whole answer's budget. The import graph of a fresh ``fgl-workbench epsilon`` process holds
    it only with ``--pld``."""
    line = [*SGM.split(), "--sigma", "1.1", "--q", "0.01", "--steps", "1000"]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fgl_workbench", "epsilon", *line]
        + ["--pld"] * pld,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {row.rsplit("|", 1)[-1].strip() for row in done.stderr.splitlines()}
    assert ("dp_accounting" in imported) == pld
    assert "epsilon = 1.71" in done.stdout


def test_json_matches_the_api(capsys):
    from fgl_workbench.accountants import PrivacyLedger, SubsampledGaussian, epsilon

    code, out, _ = run(
        capsys,
        SGM + " --sigma 1.5 --q 0.04 --steps 2250 --orders opacus --no-refine --json --pld",
    )
    data = json.loads(out)
    want = epsilon(
        PrivacyLedger((SubsampledGaussian(0.04, 1.5, 2250),)), 1e-5, orders="opacus", refine=False
    )
    assert code == 0 and data["epsilon"] == want.epsilon and data["order"] == 3.9
    assert data["steps"] == 2250 and isinstance(data["steps"], int)
    assert 0.5 * data["epsilon"] < data["epsilon_pld"] < data["epsilon"]


def test_target_epsilon_calibrates_sigma_and_steps(capsys):
    code, out, _ = run(capsys, SGM + " --q 0.01 --steps 1000 --target-epsilon 2 --json")
    data = json.loads(out)
    assert code == 0 and data["epsilon"] <= 2.0 and data["epsilon"] > 1.999
    assert data["solved"]["sigma"] == pytest.approx(1.0223, abs=1e-3)
    code, out, _ = run(
        capsys,
        SGM + " --q 0.01 --sigma 1.0 --target-epsilon 2 --solve steps --json",
    )
    assert json.loads(out)["solved"]["steps"] == 881


def test_metric_gaussian_reproduces_the_headline_cell(capsys):
    code, out, _ = run(
        capsys,
        "--mechanism metric-gaussian --sigma0 1 --releases 200 --rho 0.1466 --delta 1e-4 "
        "--orders opacus --no-refine --json",
    )
    assert code == 0 and round(json.loads(out)["epsilon"], 3) == 10.097


def test_grid_writes_csv_and_plot(tmp_path, capsys):
    target = tmp_path / "grid.csv"
    code, out, _ = run(
        capsys,
        "--mechanism",
        "subsampled-gaussian",
        "--sigma",
        "0.5:3:0.5",
        "--q",
        "0.01,0.05",
        "--steps",
        "1000",
        "--out",
        str(target),
    )
    assert code == 0 and "12 configurations" in out
    rows = list(csv.DictReader(target.open()))
    assert len(rows) == 12
    by_q = {}
    for r in rows:
        by_q.setdefault(r["q"], []).append((float(r["sigma"]), float(r["epsilon"])))
    for series in by_q.values():  # ε falls as σ grows
        eps = [e for _, e in sorted(series)]
        assert eps == sorted(eps, reverse=True)
    assert target.with_suffix(".png").stat().st_size > 5000


def test_grid_from_yaml(tmp_path, capsys):
    spec = tmp_path / "grid.yaml"
    spec.write_text("mechanism: gaussian\nsigma: [1, 2, 4]\ncount: 10\n")
    code, out, _ = run(capsys, "--json --grid", str(spec), "--out", str(tmp_path / "g.csv"))
    assert code == 0 and json.loads(out)["rows"] == 3
    spec.write_text("mechanism: gaussian\nsigmaa: 1\n")
    code, _, err = run(capsys, "--grid", str(spec))
    assert code == 2 and "unknown keys ['sigmaa']" in err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--sigma", "0", "--sigma: expected a number > 0"),
        ("--sigma", "abc", "--sigma: expected a number"),
        ("--q", "1.5", "--q: expected a sampling rate in (0, 1]"),
        ("--q", "0", "--q: expected a sampling rate in (0, 1]"),
        ("--delta", "1", "--delta: expected a number in (0, 1)"),
        ("--steps", "-3", "--steps: expected a whole number >= 0"),
        ("--steps", "2.5", "--steps: expected a whole number >= 0"),
    ],
)
def test_bad_input_is_rejected_clearly(capsys, flag, value, message):
    args = {"--sigma": "1", "--q": "0.1", "--steps": "10", "--delta": "1e-5", flag: value}
    argv = ["--mechanism", "subsampled-gaussian"]
    for k, v in args.items():
        argv += [k, v]
    code, _, err = run(capsys, " ".join(argv))
    assert code == 2 and message in err and "Traceback" not in err


def test_missing_parameter_is_named(capsys):
    code, _, err = run(capsys, "--mechanism laplace")
    assert code == 2 and "--b: required" in err


def test_extreme_inputs_give_finite_or_inf_with_warning(capsys):
    code, out, _ = run(capsys, "--mechanism gaussian --sigma 1e-200 --json")
    data = json.loads(out)
    assert code == 0 and data["epsilon"] == math.inf and data["warnings"]
    code, out, _ = run(capsys, SGM + " --sigma 100 --q 1e-12 --steps 1000000000 --json")
    data = json.loads(out)
    assert math.isfinite(data["epsilon"]) and data["epsilon"] >= 0


def test_delta_flag_overrides_the_yaml_even_at_its_default(tmp_path, capsys):
    spec = tmp_path / "one.yaml"
    spec.write_text("mechanism: gaussian\nsigma: 2\ndelta: 0.001\n")
    _, out, _ = run(capsys, "--json --grid", str(spec))
    assert json.loads(out)["delta"] == 0.001
    _, out, _ = run(capsys, "--json --delta 1e-5 --grid", str(spec))
    assert json.loads(out)["delta"] == 1e-5


def test_malformed_grid_yaml_and_huge_ranges_are_refused_at_once(tmp_path, capsys):
    """Found by fuzzing: a malformed --grid file gave a traceback and a 1e9-value range hung."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("mechanism: gaussian\nsigma: [1, 2\n")
    code, _, err = run(capsys, "--grid", str(bad))
    assert code == 2 and "is not valid YAML (line" in err and "Traceback" not in err
    code, _, err = run(capsys, SGM + " --sigma 1 --q 0.01 --steps 1:1000000000:1")
    assert code == 2 and "at most 10,000 per flag" in err
    for bad in ("1:inf:1", "1:2:1e-320"):  # an overflow traceback once
        code, _, err = run(capsys, SGM + f" --q 0.01 --steps 100 --sigma {bad}")
        assert code == 2 and "Traceback" not in err and "--sigma" in err


# a complete row as a run stores it (readers check every field)
CONFIG = {
    "dataset": {"name": "cora"},
    "partition": {"method": "louvain", "num_clients": 2},
    "target": {"name": "fedavg"},
    "seed": 0,
}
UTILITY, COMM = {"accuracy": 0.8, "macro_f1": 0.7}, {"rounds": 1, "bytes": {"up": 0, "down": 0}}


def stored_cell(cell_id: str, label: str, server: float):
    """A cell row sharing its label with others (a σ sweep), ε against the server given."""
    from fgl_workbench.storage.store import CellRow

    rows = tuple(
        {"adversary": a, "unit": "client", "epsilon": e, "delta": 1e-5, "note": a}
        for a, e in (("server", server), ("querier", 2.0))
    )
    return CellRow(cell_id, label, CONFIG, UTILITY, COMM, [], 2.0, 0.0, 0.0, rows)


def test_run_prints_every_cell_of_a_shared_label(tmp_path, capsys):
    """Two cells of a σ sweep share a label: keyed by label, one hid the other, and with it
    the central DP-FedAvg cell's ∞ against the server."""
    from fgl_workbench.interface import api
    from fgl_workbench.storage.store import ResultsStore

    store = ResultsStore(tmp_path)
    store.put_cell(stored_cell("aaaa", "cora/fedavg+dp-fedavg", math.inf), "h1")
    store.put_cell(stored_cell("bbbb", "cora/fedavg+dp-fedavg", 3.0), "h2")
    store.close()
    figures = api.privacy(tmp_path)
    assert set(figures) == {"aaaa", "bbbb"}
    assert {f["label"] for f in figures.values()} == {"cora/fedavg+dp-fedavg"}
    code, out, _ = run(capsys, f"--run {tmp_path}")
    assert code == 0 and out.count("cora/fedavg+dp-fedavg") == 2
    server = [line for line in out.splitlines() if "against server" in line]
    assert [line.split("ε = ")[1].split()[0] for line in server] == ["inf", "3"]
    code, out, _ = run(capsys, f"--run {tmp_path} --json")
    data = json.loads(out)
    assert data["aaaa"]["epsilons"][1]["epsilon"] == "inf"
    assert data["aaaa"]["label"] == data["bbbb"]["label"]


@pytest.mark.parametrize(
    "q, sigma, target",
    [(1e-6, 50.0, 10.0), (1e-4, 100.0, 100.0)],
)
def test_solving_steps_at_tiny_q_answers_a_sound_epsilon(capsys, q, sigma, target):
    """Rounding near α = 1 made the RDP curve step down over ~1e6+ steps, and the accountant
    raised (a traceback). Now the unresolved orders fall back to a valid bound: the ε is at
    least dp_accounting's RDP ε of the same steps and within 1 % of it."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant

    code, out, err = run(
        capsys,
        f"{SGM} --q {q:g} --sigma {sigma:g} --target-epsilon {target:g} --solve steps --json",
    )
    assert code == 0 and "Traceback" not in err
    data = json.loads(out)
    steps = data["solved"]["steps"]
    assert steps > 10**6 and data["epsilon"] <= target
    theirs = rdp_privacy_accountant.RdpAccountant()
    theirs.compose(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )
    reference = theirs.get_epsilon(1e-5)
    assert reference * (1 - 1e-9) <= data["epsilon"] <= reference * 1.01


def test_ce_fedgnn_run_shows_infinity_against_the_exchange_receivers(tmp_path, capsys):
    """CE-FedGNN sends boundary nodes' exact degrees to the server and the halo holders: the
    store once printed a finite ε against clients (93.08 at the paper's noise), and metric-DP's
    ε(ρ) was one figure for everyone. ``epsilon --run``, the report and the results table now
    show ∞ against server and clients, standard and metric-DP, from the same stored rows."""
    from fgl_workbench.interface import api
    from fgl_workbench.storage.store import ResultsStore, metric_figure

    target = {
        "name": "ce-fedgnn",
        "params": {
            "rounds": 3,
            "local_steps": 2,
            "model": {"arch": "sage", "hidden": 16},
            "model_noise": 1e-3,
            "estimator_noise": 1e-3,
        },
        "defenses": [{"name": "metric-dp", "params": {"sigma0": 0.5, "k": 5}}],
    }
    suite = {
        "name": "ce-exchange",
        "reproducible": True,
        "datasets": [{"name": "csbm", "params": {"num_nodes": 200}}],
        "partitions": [{"method": "louvain", "num_clients": 3}],
        "targets": [target],
    }
    api.run_suite(suite, tmp_path)
    (cell,) = ResultsStore(tmp_path, create=False).cells()
    metric = {e["adversary"]: e for e in cell.metric_epsilons}
    assert all(metric[who]["epsilon"] == math.inf for who in ("server", "clients", "querier"))
    capsys.readouterr()
    code, out, _ = run(capsys, f"--run {tmp_path}")
    assert code == 0
    assert "against clients  client  ε = inf RDP" in out
    shown = metric_figure(metric["clients"])
    assert f"against clients  node    metric-DP {shown}" in out and "exact degrees" in out
    html = api.build_report(tmp_path).read_text()
    assert shown in html and "node (metric-DP)" in html
    frame = api.results(tmp_path)
    assert frame["epsilon.clients.client"].iloc[0] == math.inf
    assert frame["epsilon_metric.server.node"].iloc[0] == math.inf


def test_the_grid_is_not_written_through_a_hard_link(tmp_path, capsys):
    """A hard link planted where the grid goes would let the write change another name's
    file: refused in one line, like every output, and the other file stays as it was."""
    other = tmp_path / "elsewhere.csv"
    other.write_text("kept\n")
    (tmp_path / "g.csv").hardlink_to(other)
    spec = tmp_path / "grid.yaml"
    spec.write_text("mechanism: gaussian\nsigma: [1, 2]\ncount: 10\n")
    code, _, err = run(capsys, "--grid", str(spec), "--out", str(tmp_path / "g.csv"))
    assert code == 2 and "hard link" in err.lower() and err.count("\n") == 1
    assert other.read_text() == "kept\n"
