"""The verdict says what the stored metrics say: which attacks beat chance, the strongest one,
the ε against each party, the accuracy and its cost, and the warnings a reader needs."""

import math
from pathlib import Path

import numpy as np
import pytest

from fgl_workbench.reports.summary import configurations, wilson
from fgl_workbench.reports.verdict import AUDITOR_HEADER, auditor_rows, verdicts
from fgl_workbench.storage.store import AttackRow, CellRow, ResultsStore


@pytest.fixture(scope="module")
def stored(dp_report):
    store = ResultsStore(Path(dp_report).parent)
    try:
        return store.cells(), store.attacks()
    finally:
        store.close()


def test_each_configuration_gets_the_stored_numbers(stored):
    cells, attacks = stored
    found = {v.configuration: v for v in verdicts(cells, attacks, 1e-5)}
    assert set(found) == {label for label, _ in configurations(cells)}
    for label, group in configurations(cells):
        v = found[label]
        ids = {c.cell_id for c in group}
        mine = [a for a in attacks if a.cell_id in ids and a.status == "ok"]
        # one seed: the stored row itself, the strongest by TPR at 1 % FPR, then AUC
        best = max(mine, key=lambda a: (a.metrics["tpr@0.01"], a.metrics["auc"]))
        m = best.metrics
        assert f"AUC {m['auc']:.3f} [{m['auc_ci_low']:.3f}, " in v.text
        tpr = f"TPR {m['tpr@0.01']:.1%} [{m['tpr@0.01_ci_low']:.1%}, {m['tpr@0.01_ci_high']:.1%}]"
        assert tpr + " at 1 % FPR" in v.text
        assert f"Of {len(mine)} membership and link attacks" in v.text
        assert f"Accuracy {group[0].utility['accuracy']:.1%}" in v.text
        for e in group[0].epsilons:
            value = "∞" if not math.isfinite(e["epsilon"]) else f"{e['epsilon']:.3g}"
            assert f"ε = {value} per {e['unit']}" in v.text
    defended = next(v for v in found.values() if "dp-fedavg" in v.configuration)
    assert "against" in defended.text and "undefended: the defense costs" in defended.text
    assert any("No guarantee against the server" in w for w in defended.warnings)


def _cell(seed, accuracy, epsilons=(), defenses=(), audits=(), histogram=(50, 50)):
    config = {
        "dataset": {"name": "d"},
        "partition": {"method": "p", "num_clients": 1},
        "target": {"name": "t", "params": {}, **({"defenses": list(defenses)} if defenses else {})},
        "seed": seed,
    }
    part = [{"label_histogram": list(histogram), "num_test": 400}]
    label = "d/p-1/t" + "".join(f"+{d['name']}" for d in defenses) + f"/seed{seed}"
    return CellRow(
        f"{label}", label, config, {"accuracy": accuracy, "macro_f1": accuracy}, {}, part,
        None, 0.0, 0.0, tuple(epsilons), tuple(audits),
    )  # fmt: skip


def _attack(cell, auc, low, high, key="mia-threshold-1", tpr=0.02, **more):
    metrics = {"auc": auc, "auc_ci_low": low, "auc_ci_high": high, "tpr@0.01": tpr, **more}
    label = key.rsplit("-", 1)[0]
    return AttackRow(cell.cell_id, key, label, {}, "ok", None, metrics, None, 0.0)


def _eps(value, who=("server", "clients", "querier")):
    return [{"adversary": w, "unit": "record", "epsilon": value, "note": ""} for w in who]


def test_an_inconclusive_row_is_noted_and_a_gain_is_named_as_one():
    plain = _cell(0, 0.80)
    dp = _cell(0, 0.85, _eps(2.0), [{"name": "dp-sgd", "params": {}}])
    attacks = [_attack(plain, 0.7, 0.66, 0.74), _attack(dp, 0.52, 0.44, 0.60)]
    defended = verdicts([plain, dp], attacks, 1e-5)[1]
    # an inconclusive row is no evidence of safety: not green, and not called "at chance"
    assert defended.kind == "info" and defended.warnings == ()
    assert "1 is inconclusive" in defended.text and "at chance" not in defended.text
    assert "Inconclusive: mia-threshold" in defended.notes[0]
    assert "the defense gains 5.0 points" in defended.text


def test_a_defended_configuration_at_chance_reads_ok_and_names_its_cost():
    plain = _cell(0, 0.80)
    dp = _cell(0, 0.70, _eps(2.0), [{"name": "dp-sgd", "params": {}}])
    v = {
        x.configuration: x
        for x in verdicts(
            [plain, dp], [_attack(plain, 0.7, 0.66, 0.74), _attack(dp, 0.5, 0.47, 0.53)], 1e-5
        )
    }
    defended = v["d/p-1/t+dp-sgd"]
    assert defended.kind == "ok" and defended.warnings == ()
    assert "Of 1 membership and link attacks, 1 is at chance" in defended.text
    assert "ε = 2 per record against the server, clients and querier" in defended.text
    assert "the defense costs 10.0 points" in defended.text
    assert v["d/p-1/t"].kind == "warn"  # it leaks


def test_the_auditor_table_puts_the_baseline_first_with_every_figure_and_its_interval():
    dp = _cell(0, 0.70, _eps(2.0), [{"name": "dp-sgd", "params": {}}])
    plain = _cell(0, 0.80)
    sharp = {"tpr@0.01_ci_low": 0.05, "tpr@0.01_ci_high": 0.13}
    attacks = [
        _attack(dp, 0.5, 0.47, 0.53),
        _attack(dp, 0.52, 0.44, 0.60, "mia-rmia-1", tpr=0.01),
        _attack(plain, 0.7, 0.66, 0.74, tpr=0.09, **sharp),
        _attack(plain, 0.6, 0.57, 0.63, "mia-rmia-1", chance_auc=0.5,
                chance_auc_ci_low=0.45, chance_auc_ci_high=0.55),
    ]  # fmt: skip
    found = verdicts([dp, plain], attacks, 1e-5)  # the defended one named first
    assert [v.configuration for v in found] == ["d/p-1/t", "d/p-1/t+dp-sgd"]
    rows = auditor_rows(found)
    assert [dict(zip(AUDITOR_HEADER, r, strict=True)) for r in rows] == [
        {
            "configuration": "d/p-1/t",
            "ε per adversary": "∞: no DP mechanism ran",
            "accuracy [95% CI]": "80.0% [75.8%, 83.6%]",
            "utility change": "baseline",
            "strongest attack (adversary)": "mia-threshold (querier)",
            "TPR at 1% FPR [95% CI]": "9.0% [5.0%, 13.0%]",
            "AUC [95% CI]": "0.700 [0.660, 0.740]",
            "reading": "2 leaks",
        },
        {
            "configuration": "d/p-1/t+dp-sgd",
            "ε per adversary": "ε = 2 per record against the server, clients and querier",
            "accuracy [95% CI]": "70.0% [65.3%, 74.3%]",
            "utility change": "costs 10.0 points (undefended 80.0%)",
            "strongest attack (adversary)": "mia-threshold (querier)",
            "TPR at 1% FPR [95% CI]": "2.0%",
            "AUC [95% CI]": "0.500 [0.470, 0.530]",
            "reading": "1 at chance, 1 inconclusive",
        },
    ]
    lined = auditor_rows(verdicts([plain], attacks[3:], 1e-5))[0]
    assert lined[6] == "0.600 [0.570, 0.630]; chance 0.500 [0.450, 0.550]"
    (alone,) = auditor_rows(verdicts([dp], [], 1e-5))  # no twin, no attack
    assert alone[3] == "no undefended twin" and alone[4:] == ["none scored"] * 3 + ["n/a"]


def test_the_verdict_labels_the_rdp_epsilon_and_gives_the_pld_one_of_the_worst_seed():
    def with_pld(rdp, pld):
        return [{**e, "epsilon_pld": pld} for e in _eps(rdp, ("querier",))] + _eps(
            math.inf, ("server",)
        )

    dp = [{"name": "dp-sgd", "params": {}}]
    seeds = [_cell(0, 0.7, with_pld(2.0, 1.6), dp), _cell(1, 0.7, with_pld(2.1, 1.7), dp)]
    (v,) = verdicts(seeds, [], 1e-5)
    assert "ε = 2.1 per record against the querier" in v.text and "(RDP, δ = 1e-05)" in v.text
    tight = "The PLD accountant bounds the same events tighter: ε = 1.7 per record against the "
    assert tight + "querier." in v.text  # the worst seed's; the ∞ row has no PLD figure
    # one seed without a PLD figure: no PLD sentence rather than a figure for part of them
    seeds[1] = _cell(1, 0.7, _eps(2.1, ("querier",)), dp)
    (v,) = verdicts(seeds, [], 1e-5)
    assert "PLD" not in v.text


def test_warnings_name_what_could_mislead():
    dp = _cell(
        0,
        0.55,
        _eps(50.0, ("clients", "querier")) + _eps(math.inf, ("server",)),
        [{"name": "dp-fedavg", "params": {}}],
        [{"lower_bound": 3.0, "claimed": 2.0}],
        histogram=(60, 40),
    )
    (v,) = verdicts([dp], [_attack(dp, 0.55, 0.40, 0.70)], 1e-5)
    text = " ".join(v.warnings)
    assert "majority-class rate (60.0%)" in text
    assert "ε = 50 is vacuous" in text
    assert "No guarantee against the server" in text
    assert "Inconclusive: mia-threshold (" in " ".join(v.notes)  # noted, not warned
    assert "canary audit" in text
    assert v.kind == "warn"


def test_one_seeds_accuracy_interval_is_wilsons():
    low, high = wilson(0.8, 400)
    assert low < 0.8 < high and high - low == pytest.approx(
        2 * 1.96 * np.sqrt(0.16 / 400), rel=0.02
    )


def test_the_strongest_is_ranked_at_low_fpr_with_the_auc_and_chance_line_beside():
    """A higher AUC with a flat low-FPR tail is not the strongest: the one that catches more
    members at 1 % FPR is. Its TPR carries its interval; its AUC the chance line, where the
    challenge states one, and nothing where it does not."""
    cell = _cell(0, 0.8)
    broad = _attack(cell, 0.70, 0.66, 0.74, "mia-lira-1", tpr=0.01)
    sharp = _attack(
        cell, 0.60, 0.56, 0.64, "mia-rmia-1", tpr=0.09,
        **{"tpr@0.01_ci_low": 0.05, "tpr@0.01_ci_high": 0.13},
        chance_auc=0.53, chance_auc_ci_low=0.49, chance_auc_ci_high=0.57,
    )  # fmt: skip
    (v,) = verdicts([cell], [broad, sharp], 1e-5)
    assert "Strongest at low FPR: mia-rmia as the querier, TPR 9.0% [5.0%, 13.0%]" in v.text
    assert "AUC 0.600 [0.560, 0.640] against a chance line of 0.530 [0.490, 0.570]" in v.text
    (v,) = verdicts([cell], [broad], 1e-5)  # no chance line stated: none shown, no failure
    assert "AUC 0.700 [0.660, 0.740]." in v.text and "against a chance line" not in v.text


def test_a_band_above_the_ceiling_warns_and_a_noisy_line_does_not():
    """The verdict reads the ROC curves: a band wholly above the DP ceiling is a warning that
    the accounting is wrong; a line above it whose band reaches below is not."""
    from fgl_workbench.reports.plots import FPR_GRID, RocCurve

    dp = _cell(0, 0.8, _eps(1.0), [{"name": "dp-sgd", "params": {}}])
    attack = _attack(dp, 0.52, 0.47, 0.57, "mia-rmia-1")
    tpr = np.minimum(1.0, 30 * FPR_GRID)  # far above e·FPR at low FPR
    label = "d/p-1/t+dp-sgd"

    def curve(low):
        return RocCurve(label, "mia-rmia", FPR_GRID, tpr, 1, (1.0, 1e-5), 1 / 304, (low, tpr))

    (noisy,) = verdicts([dp], [attack], 1e-5, [curve(np.zeros_like(tpr))])
    assert noisy.warnings == () and noisy.kind == "info"
    (crossed,) = verdicts([dp], [attack], 1e-5, [curve(0.5 * tpr)])
    assert crossed.kind == "warn"
    assert "lies above the DP ceiling of ε = 1 with its whole 95 % band" in crossed.warnings[0]
    assert "the accounting or the defense's implementation is wrong" in crossed.warnings[0]


def test_a_leaking_row_under_an_epsilon_past_a_float_reads_a_ceiling_of_one():
    """ε of about 2,000 (CE-FedGNN's exchanged embeddings at σ0 = 0) made e^ε overflow and
    the report's verdict crash; the ceiling on TPR at 1 % FPR is 100 % past ln 100."""
    plain = _cell(0, 0.80)
    dp = _cell(0, 0.80, _eps(2000.0), [{"name": "dp-sgd", "params": {}}])
    attacks = [_attack(plain, 0.7, 0.66, 0.74), _attack(dp, 0.7, 0.66, 0.74)]
    defended = verdicts([plain, dp], attacks, 1e-5)[1]
    assert any("a TPR of at most 100.0% at 1 % FPR" in w for w in defended.warnings)
