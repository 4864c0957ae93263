"""The uncertainty beside what auditors read first, in the report's and the CLI's tables: each
TPR with its 95 % interval, the chance line beside the AUC where a challenge states one, and an
ε lower bound that certified nothing said in words, not as 0.000."""

import re
from pathlib import Path

import pytest

from fgl_workbench.reports.intervals import (
    CHANCE_HEADER,
    NOT_CERTIFIABLE,
    attack_tables,
    seed_interval,
    strongest_with_uncertainty,
)
from fgl_workbench.reports.summary import fitted
from fgl_workbench.storage.store import AttackRow, CellRow


def _cell(seed: int, dp: bool = False) -> CellRow:
    config = {"seed": seed, "target": {"name": "fedavg", "params": {"dp": dp}}}
    utility = {"accuracy": 0.8, "macro_f1": 0.8}
    label = f"D/p/fedavg{'+dp' if dp else ''}/seed{seed}"
    return CellRow(f"c{seed}{dp}", label, config, utility, {}, [], None, 0, 0)


def _attack(cell: CellRow, name: str = "mia-rmia", **metrics) -> AttackRow:
    base = {"auc": 0.6, "auc_ci_low": 0.55, "auc_ci_high": 0.65, "epsilon_lb": 0.3}
    base |= {"epsilon_lb_ceiling": 3.7, "tpr@0.01": 0.05, "tpr@0.001": None}
    base |= {"tpr@0.01_ci_low": 0.02, "tpr@0.01_ci_high": 0.09}
    base |= {"tpr@0.001_ci_low": None, "tpr@0.001_ci_high": None}
    return AttackRow(cell.cell_id, name, name, {}, "ok", None, base | metrics, None, 1.0)


def _membership(cells, attacks) -> tuple[list[str], list[list[str]]]:
    ((family, header, body),) = attack_tables(cells, attacks)
    assert family == "membership"
    return header, body


def test_each_tpr_carries_its_interval_and_an_unresolved_one_stays_na():
    cell = _cell(0)
    header, (row,) = _membership([cell], [_attack(cell)])
    assert "TPR@1% [95% CI]" in header and "TPR@0.1%" in header  # no interval: no CI header
    assert row[header.index("TPR@1% [95% CI]")] == "0.050 [0.020, 0.090]"
    assert row[header.index("TPR@0.1%")] == "n/a"


def test_over_seeds_the_interval_is_never_narrower_than_the_seeds_own():
    """Two seeds with the same TPR say nothing of their records' noise: the interval keeps
    the seeds' own half-width at least."""
    rows = [
        {"tpr@0.01": 0.05, "tpr@0.01_ci_low": 0.02, "tpr@0.01_ci_high": 0.08},
        {"tpr@0.01": 0.05, "tpr@0.01_ci_low": 0.03, "tpr@0.01_ci_high": 0.07},
    ]
    assert seed_interval(rows, "tpr@0.01") == pytest.approx((0.025, 0.075))
    spread = [{**rows[0], "tpr@0.01": 0.0}, {**rows[1], "tpr@0.01": 0.5}]
    low, high = seed_interval(spread, "tpr@0.01")
    assert low == 0.0 and high > 0.5  # Student-t over two seeds, clipped to a rate's range
    cells = [_cell(0), _cell(1)]
    header, (row,) = _membership(cells, [_attack(c) for c in cells])
    assert row[header.index("TPR@1% [95% CI]")] == "0.050 [0.015, 0.085]"  # own: ± 0.035


def test_the_chance_line_sits_beside_the_auc_when_present_and_nothing_when_absent():
    cell = _cell(0)
    plain = _attack(cell)
    header, _ = _membership([cell], [plain])
    assert CHANCE_HEADER not in header  # absent: no column, no failure
    lined = _attack(cell, chance_auc=0.52, chance_auc_ci_low=0.47, chance_auc_ci_high=0.57)
    header, (row,) = _membership([cell], [lined])
    at = header.index(CHANCE_HEADER)
    assert header[at - 1] == "AUC [95% CI]"
    assert row[at] == "0.520 [0.470, 0.570]"
    other = _attack(cell, "mia-threshold")  # a row of the same table without one
    header, rows = _membership([cell], [lined, other])
    assert [r[header.index(CHANCE_HEADER)] for r in rows] == ["0.520 [0.470, 0.570]", "n/a"]
    printed = "\n".join(fitted(attack_tables([cell], [lined]), 200))  # as the CLI prints it
    assert re.search(rf"\| +AUC \[95% CI\] \| +{re.escape(CHANCE_HEADER)} \|", printed)
    assert "| 0.520 [0.470, 0.570] |" in printed


def test_a_lower_bound_that_certified_nothing_is_said_in_words():
    cell = _cell(0)
    header, (row,) = _membership([cell], [_attack(cell, epsilon_lb=0.0)])
    assert row[header.index("ε lb")] == "none certified (at most 3.70 at this size)"
    header, (row,) = _membership([cell], [_attack(cell, epsilon_lb=0.0, epsilon_lb_ceiling=0.0)])
    assert row[header.index("ε lb")] == NOT_CERTIFIABLE
    header, (row,) = _membership([cell], [_attack(cell)])
    assert row[header.index("ε lb")] == "0.300"


def test_the_audit_gap_table_names_no_largest_bound_where_none_certified():
    plain, dp = _cell(0), _cell(0, dp=True)
    line = {"chance_auc": 0.5, "chance_auc_ci_low": 0.45, "chance_auc_ci_high": 0.55}
    attacks = [_attack(plain, **line), _attack(dp, epsilon_lb=0.0)]
    attacks.append(_attack(dp, "mia-lira", epsilon_lb=0.0))
    header = ["configuration", "ε", "accuracy %", "best AUC", "best TPR@1% FPR", "largest ε lb"]
    rows = [
        ["D/p/fedavg", "none", "80.0", "0.600 (mia-rmia)", "0.050 (mia-rmia)", "0.300 (mia-rmia)"],
        ["D/p/fedavg+dp", "1", "80.0", "0.600 (x)", "0.050 (x)", "0.000 (mia-lira)"],
    ]
    _, (mine, defended) = strongest_with_uncertainty((header, rows), [plain, dp], attacks)
    assert mine[3] == "0.600 (mia-rmia); chance line 0.500 [0.450, 0.550]"
    assert mine[4] == "0.050 [0.020, 0.090] (mia-rmia)" and mine[5] == "0.300 (mia-rmia)"
    assert defended[3] == "0.600 (x)"  # no chance line stated: nothing added
    assert defended[5] == "none certified (at most 3.70 at this size)"


def test_a_real_run_shows_intervals_in_report_cli_export_and_mlflow(dp_report, capsys):
    """The dp fixture's run: every place a TPR is shown carries its interval."""
    from fgl_workbench.interface.cli import print_measured
    from fgl_workbench.reports.frame import results_frame
    from fgl_workbench.reports.mlflow_log import cell_values
    from fgl_workbench.storage.store import ResultsStore

    out = Path(dp_report).parent
    page = Path(dp_report).read_text()
    assert "TPR@1% [95% CI]" in page
    assert re.search(r"<td[^>]*>0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]</td>", page)
    assert "Shaded: its pointwise 95 % band" in page
    print_measured(out)
    printed = capsys.readouterr().out
    assert "TPR@1% [95% CI]" in printed
    table = results_frame(out)
    for key in ("tpr@0.01", "tpr@0.01_ci_low", "tpr@0.01_ci_high", "epsilon_lb_ceiling"):
        assert f"metric.{key}" in table and table[f"metric.{key}"].notna().all()
    assert (table["metric.tpr@0.01_ci_low"] <= table["metric.tpr@0.01"]).all()
    store = ResultsStore(out, create=False)
    cells, attacks = store.cells(), store.attacks()
    store.close()
    metrics, _ = cell_values(cells[0], [a for a in attacks if a.cell_id == cells[0].cell_id])
    assert {"mia-threshold.tpr_at_0.01_ci_low", "mia-threshold.tpr_at_0.01_ci_high"} <= set(metrics)
