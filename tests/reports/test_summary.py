import math

import pytest

from fgl_workbench.reports.summary import across_seeds, attacks_across_seeds, family_rows
from fgl_workbench.storage.store import AttackRow, CellRow


def cell(seed: int, lr: float) -> CellRow:
    config = {"seed": seed, "target": {"name": "fedavg", "params": {"lr": lr}}}
    utility = {"accuracy": 0.5 + seed / 10, "macro_f1": 0.5, "auc": 0.6}
    return CellRow(f"c{seed}-{lr}", f"D/p/fedavg/seed{seed}", config, utility, {}, [], None, 0, 0)


def attack(cell_id: str, auc: float | None, status: str = "ok") -> AttackRow:
    metrics = None if auc is None else {"auc": auc, "tpr@0.01": 0.1, "tpr@0.001": None}
    return AttackRow(cell_id, "mia", "mia-lira", {"hops": 0}, status, None, metrics, None, 1.0)


def test_attack_rows_average_over_seeds_per_configuration():
    cells = [cell(s, lr) for s in (0, 1) for lr in (0.1, 0.01)]
    attacks = [attack("c0-0.1", 0.6), attack("c1-0.1", 0.8), attack("c0-0.01", 0.7)]
    attacks.append(attack("c1-0.01", None, "not_applicable"))
    rows = attacks_across_seeds(cells, attacks)
    assert [r.cell for r in rows] == [
        "D/p/fedavg [lr=0.01]",
        "D/p/fedavg [lr=0.1]",
    ]
    assert rows[1].metrics["auc"] == pytest.approx((0.7, 0.1414), abs=1e-4)
    mean, spread = rows[0].metrics["auc"]
    assert mean == 0.7 and math.isnan(spread)  # one seed reported: its spread is unknown
    assert rows[0].seeds == 2  # the failed seed skipped
    assert "tpr@0.001" not in rows[0].metrics  # never resolvable: shown as n/a
    assert [s.label for s in across_seeds(cells)] == [r.cell for r in rows]


def test_attack_table_marks_unresolvable_metrics_and_failed_rows():
    cells = [cell(0, 0.1), cell(1, 0.1)]
    ((family, header, (row,)),) = family_rows(
        attacks_across_seeds(cells, [attack("c0-0.1", 0.6), attack("c1-0.1", 0.8)])
    )
    assert family == "membership"
    assert header[:5] == ["configuration", "attack", "seeds", "AUC [95% CI]", "TPR@1%"]
    # two seeds: Student-t with one degree of freedom, cut to the AUC's range
    assert row[3:6] == ["0.700 [0.000, 1.000]", "0.100 ± 0.000", "n/a"]
    failed = attacks_across_seeds(cells, [attack("c0-0.1", None, "not_applicable")])
    ((_, _, (row,)),) = family_rows(failed)
    assert row[-1] == "not applicable"


def test_each_attack_family_gets_its_own_columns():
    from fgl_workbench.reports.summary import AttackSummary, family_rows

    rows = [
        AttackSummary("c", "mia-threshold", 1, {"auc": (0.6, 0.0)}, "ok"),
        AttackSummary("c", "link-stealing(distance=cosine)", 1, {"auc_cut": (0.7, 0.0)}, "ok"),
        AttackSummary("c", "label-distribution", 1, {"tv_mean": (0.2, 0.0)}, "ok"),
    ]
    tables = {family: (header, body) for family, header, body in family_rows(rows)}
    assert set(tables) == {"membership", "link", "distribution"}
    assert "AUC cut" in tables["link"][0] and "TV" in tables["distribution"][0]
    assert tables["distribution"][1][0][3] == "0.200 ± 0.000"


def test_accuracy_interval_is_student_t_over_seeds():
    from scipy import stats

    from fgl_workbench.reports.summary import format_interval, mean_interval

    low, high = mean_interval([0.5, 0.6, 0.7])
    half = stats.t.ppf(0.975, 2) * 0.1 / 3**0.5
    assert (low, high) == pytest.approx((0.6 - half, 0.6 + half))
    assert format_interval(mean_interval([0.5])) == "n/a"
    summary = across_seeds([cell(0, 0.1), cell(1, 0.1)])[0]
    assert summary.accuracy_ci[0] < summary.accuracy[0] < summary.accuracy_ci[1]


@pytest.mark.parametrize(
    "aucs, expected",
    [
        ([0.70, 0.72, 0.71], "leaks"),
        ([0.50, 0.51, 0.49], "at chance"),
        ([0.38, 0.52, 0.66], "inconclusive"),  # straddles 0.5 with a spread of 0.14
        ([0.30, 0.31, 0.29], "below chance"),
    ],
)
def test_an_auc_row_reads_inconclusive_when_its_interval_straddles_chance_widely(aucs, expected):
    cells = [cell(s, 0.1) for s in range(len(aucs))]
    attacks = [attack(f"c{s}-0.1", a) for s, a in enumerate(aucs)]
    ((_, header, (row,)),) = family_rows(attacks_across_seeds(cells, attacks))
    assert header[-1] == "reading" and row[-1] == expected


def test_one_seed_reads_by_its_own_interval():
    from fgl_workbench.reports.summary import auc_interval, reading

    one = [{"auc": 0.53, "auc_ci_low": 0.46, "auc_ci_high": 0.60}]
    assert reading(auc_interval(one)) == "inconclusive"
    assert reading(auc_interval([{"auc": 0.53}])) == "n/a"
    # the seed that reported an AUC gives the interval, not the first row
    assert auc_interval([{"tv_mean": 0.1}, *one]) == (0.46, 0.60)


def test_equal_seeds_do_not_make_a_row_certain():
    from fgl_workbench.reports.summary import auc_interval, reading

    same = [{"auc": 0.52, "auc_ci_low": 0.45, "auc_ci_high": 0.59}] * 3
    low, high = auc_interval(same)
    assert (low, high) == pytest.approx((0.45, 0.59))
    assert reading((low, high)) == "inconclusive"


def test_an_auc_row_reads_against_its_challenges_chance_line():
    """Issue 43's review: a plug-in scoring at random, AUC 0.602 [0.505, 0.699] on a
    challenge whose chance line is 0.580, was read as "leaks" against 0.5. Rows now read
    against their challenge's chance line (0.5 where none is stated)."""
    line = {"chance_auc": 0.58, "chance_auc_ci_low": 0.52, "chance_auc_ci_high": 0.64}
    rows = [
        {"auc": 0.602, "auc_ci_low": 0.505, "auc_ci_high": 0.699, **line},  # the review's row
        {"auc": 0.75, "auc_ci_low": 0.70, "auc_ci_high": 0.80, **line},  # above the line's CI
        {"auc": 0.585, "auc_ci_low": 0.56, "auc_ci_high": 0.61, **line},  # on the line
        {"auc": 0.60, "auc_ci_low": 0.55, "auc_ci_high": 0.65},  # no line stated: 0.5
    ]
    cells = [cell(0, lr) for lr in (0.1, 0.2, 0.3, 0.4)]
    attacks = [
        AttackRow(c.cell_id, "mia", "mia-lira", {}, "ok", None, m, None, 1.0)
        for c, m in zip(cells, rows, strict=True)
    ]
    ((_, _, body),) = family_rows(attacks_across_seeds(cells, attacks))
    readings = [row[-1] for row in body]
    assert readings == ["inconclusive", "leaks", "at chance", "leaks"]


def test_wide_tables_fit_the_terminal_by_keys_a_legend_and_parts_losing_no_figure():
    from fgl_workbench.reports.summary import fitted

    configs = [f"synthetic-graphs/iid-2/fedavg{d}" for d in ("", "+dp-sgd")]
    attacks = ["mia-rmia(num_references=4)", "mia-threshold(adversary=server, signal=loss)"]
    figures = [f"0.{i:03d} [0.{i:03d}, 0.{i + 1:03d}]" for i in range(40)]
    header = ["configuration", "attack", "seeds"] + [f"metric {i}" for i in range(10)]
    rows = [
        [c, a, "1", *figures[10 * (2 * i + j) : 10 * (2 * i + j) + 10]]
        for i, c in enumerate(configs)
        for j, a in enumerate(attacks)
    ]
    tradeoff = ["configuration", "accuracy %"] + [f"{a} auc" for a in attacks]
    points = [[c, "87.2", "0.642", "0.619"] for c in configs]
    lines = fitted([("membership", header, rows), ("privacy-utility", tradeoff, points)], 100)
    assert max(map(len, lines)) <= 100
    text = "\n".join(lines)
    assert all(f in text for f in figures)  # every figure printed, in some part
    assert "membership (continued):" in text and "| C2 " in text and "| A1 auc " in text
    assert "C1  synthetic-graphs/iid-2/fedavg\n" in text
    assert "A2  mia-threshold(adversary=server, signal=loss)" in text
    # a part repeats the naming columns: each figure still beside its configuration and attack
    (line,) = [ln for ln in lines if figures[39] in ln]
    assert line.startswith("| C2            | A2     |")
    narrow = fitted([("utility", ["configuration", "AUC"], [[configs[0], "0.908"]])], 100)
    assert narrow[1:] == [
        "| configuration                 |   AUC |",
        "|-------------------------------|------:|",
        "| synthetic-graphs/iid-2/fedavg | 0.908 |",
    ]


def test_the_terminal_width_comes_from_the_terminal_with_a_floor(monkeypatch):
    from fgl_workbench.reports.summary import terminal_width

    monkeypatch.setenv("COLUMNS", "88")
    assert terminal_width() == 88
    monkeypatch.setenv("COLUMNS", "20")
    assert terminal_width() == 60


@pytest.mark.parametrize(
    ("seeds", "text"),
    [
        ([0], "seed 0"),
        ([2, 0, 1], "seeds 0–2"),
        ([0, 1], "seeds 0, 1"),
        ([0, 3, 7], "seeds 0, 3, 7"),
    ],
)
def test_seeds_read_as_which_never_as_how_many(seeds, text):
    from fgl_workbench.reports.summary import seed_text

    assert seed_text(seeds) == text
