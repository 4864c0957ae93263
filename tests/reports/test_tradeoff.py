import base64
from math import inf

import pytest

from fgl_workbench.reports.plots import encode_png
from fgl_workbench.reports.tradeoff import (
    privacy_axis,
    strongest_attacks,
    tradeoff_figure,
    tradeoff_points,
    tradeoff_table,
)
from fgl_workbench.storage.store import AttackRow, CellRow


def cell(
    seed: int,
    sigma: float | None,
    eps: float | None,
    acc: float,
    metric: float | None = None,
    **extra,
) -> CellRow:
    """A stored cell; ``eps``: its querier's ε per client (and ∞ against the server),
    ``metric``: metric-DP's ε(ρ) against a querier per node."""
    defenses = (
        [] if sigma is None else [{"name": "dp-fedavg", "params": {"noise_multiplier": sigma}}]
    )
    config = {"seed": seed, "target": {"name": "fedavg", "defenses": defenses}}
    label = "D/p/fedavg" + ("+dp-fedavg" if defenses else "") + f"/seed{seed}"
    utility = {"accuracy": acc, "macro_f1": 0.5, **extra}
    rows = () if eps is None else (row("querier", "client", eps), row("server", "client", inf))
    metrics = () if metric is None else ({**row("querier", "node", metric), "rho": 0.4},)
    return CellRow(f"{seed}-{sigma}", label, config, utility, {}, [], eps, 0, 0, rows, (), metrics)


def row(adversary: str, unit: str, eps: float) -> dict:
    return {"adversary": adversary, "unit": unit, "epsilon": eps, "delta": 1e-5, "note": ""}


def attack(cell_id: str, auc: float) -> AttackRow:
    metrics = {"auc": auc, "tpr@0.01": auc / 10, "epsilon_lb": 0.1}
    return AttackRow(cell_id, "m", "mia-threshold", {}, "ok", None, metrics, None, 1.0)


@pytest.fixture
def store_rows():
    cells = [
        cell(s, sig, e, a)
        for s in (0, 1)
        for sig, e, a in [(None, None, 0.8), (1.0, 10.0, 0.6), (4.0, 2.0, 0.3)]
    ]
    attacks = [attack(c.cell_id, 0.5 + c.utility["accuracy"] / 10) for c in cells]
    return cells, attacks


def test_points_average_seeds_and_keep_the_undefended_reference(store_rows):
    points = {p.configuration: p for p in tradeoff_points(*store_rows)}
    assert points["D/p/fedavg"].epsilon is None
    swept = [p for p in points.values() if p.epsilon is not None]
    assert sorted(p.epsilon for p in swept) == [2.0, 10.0]
    assert {p.series for p in swept} == {"D/p/fedavg+dp-fedavg"}
    assert points["D/p/fedavg"].attacks["mia-threshold"]["auc"] == pytest.approx((0.58, 0.0))
    assert privacy_axis(list(points.values())) == "epsilon"


def test_table_and_figure(store_rows):
    points = tradeoff_points(*store_rows)
    table = tradeoff_table(points)
    # one ε per configuration names whom it protects against, and which unit
    assert table[0].startswith("| configuration | ε against a querier | accuracy % |")
    assert any("| 2 per client | 30.0 ± 0.0 |" in line for line in table)
    assert any("| none | 80.0 ± 0.0 |" in line for line in table)
    figure = tradeoff_figure(points)
    accuracy, auc, tpr, audit = figure.axes[:4]
    assert accuracy.get_title() == "accuracy" and audit.get_title().startswith("audit")
    # one line per series in the accuracy panel, the undefended one as a reference line
    assert len(accuracy.get_lines()) == len({p.series for p in points})
    assert any(line.get_label() == "lb = accountant ε" for line in audit.get_lines())
    assert accuracy.get_xlabel() == "accountant ε against a querier (δ of the suite), per client"
    png = base64.b64decode(encode_png(figure))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_axis_falls_back_to_metric_epsilon_then_kl():
    metric = [cell(0, None, None, 0.5, metric=3.0, metric_rho=0.4)]
    (point,) = tradeoff_points(metric, [])
    assert privacy_axis([point]) == "metric" and point.units == {"metric": "node"}
    assert "| 3 per node |" in tradeoff_table([point])[2]
    assert tradeoff_table([point])[0].startswith("| configuration | ε(ρ) against a querier |")
    kl = [cell(0, None, None, 0.5, ib_kl_nats=12.0)]
    assert privacy_axis(tradeoff_points(kl, [])) == "kl"
    plain = [cell(0, None, None, 0.5)]
    assert privacy_axis(tradeoff_points(plain, [])) is None
    assert tradeoff_figure(tradeoff_points(plain, [])) is None


def test_strongest_attack_per_configuration(store_rows):
    cells, attacks = store_rows
    second = [
        AttackRow(c.cell_id, "s", "mia-shadow", {}, "ok", None, {"auc": 0.9}, None, 1.0)
        for c in cells
        if c.epsilon == 2.0
    ]
    header, rows = strongest_attacks(tradeoff_points(cells, attacks + second))
    assert header[:3] == ["configuration", "ε against a querier", "accuracy %"]
    by_eps = {r[1]: r for r in rows}
    # the shadow attack is stronger here
    assert by_eps["2 per client"][3] == "0.900 ± 0.000 (mia-shadow)"
    assert by_eps["10 per client"][3] == "0.560 ± 0.000 (mia-threshold)"
    # the shadow row has no TPR
    assert by_eps["2 per client"][4] == "0.053 ± 0.000 (mia-threshold)"
    assert by_eps["none"][2] == "80.0 ± 0.0"


def test_table_leaves_out_attacks_without_auc(store_rows):
    cells, attacks = store_rows
    recon = AttackRow(
        cells[0].cell_id, "g", "gradient-inversion", {}, "ok", None, {"cosine": 0.4}, None, 1.0
    )
    table = tradeoff_table(tradeoff_points(cells, attacks + [recon]))
    assert "mia-threshold auc" in table[0] and "gradient-inversion" not in table[0]


def test_a_cells_privacy_figure_names_the_adversary_and_unit():
    """The report's one-line privacy figure printed "querier 2" and metric-DP's ε(ρ) as one
    figure for everyone; it names the unit, and reads ε(ρ) from the per-adversary rows
    ``epsilon --run`` prints (``metric_figure``)."""
    from fgl_workbench.reports.report import privacy_figure

    figure = privacy_figure(cell(0, 1.0, 2.0, 0.5, metric=3.0, metric_rho=0.4))
    assert figure == "querier ε = 2 per client; querier metric-DP ε(ρ=0.4) = 3 per node"


def test_the_table_gives_intervals_and_says_when_nothing_is_certified(store_rows):
    """TPR at 1 % FPR carries its interval in the privacy-utility table, and an ε lower
    bound of 0 reads as none certified, never as a measured 0.000; a run where no attack
    certified anything has no audit-gap panel of zeros."""
    cells, attacks = store_rows
    rows = [
        AttackRow(
            a.cell_id,
            "m",
            "mia-threshold",
            {},
            "ok",
            None,
            {**a.metrics, "tpr@0.01_ci_low": 0.0, "tpr@0.01_ci_high": 0.2, "epsilon_lb": 0.0},
            None,
            1.0,
        )
        for a in attacks
    ]
    points = tradeoff_points(cells, rows)
    table = tradeoff_table(points)
    assert all("none certified" in line for line in table[2:])
    assert all(" [" in line and "0.000 |" not in line for line in table[2:])
    audit = tradeoff_figure(points).axes[3]
    assert not audit.axison and "no attack certified" in audit.texts[0].get_text()
