import numpy as np
import pytest
from scipy.stats import norm

from fgl_workbench.errors import ConfigError
from fgl_workbench.external import audit_scores, audit_stored, degree_buckets
from fgl_workbench.storage.store import ResultsStore


def separated(n: int, shift: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Members score N(shift, 1), non-members N(0, 1): the AUC is Φ(shift / √2)."""
    truth = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    return np.random.default_rng(seed).normal(truth * shift, 1.0), truth


def test_stored_scores_give_the_stored_metrics_exactly(quickstart):
    """Every membership row of the quickstart's folder, audited again from its own records,
    gives its stored metrics bit for bit (AUC, intervals, TPRs, the held-out ε bound)."""
    store = ResultsStore(quickstart, read_only=True)
    rows = [a for a in store.attacks() if a.status == "ok"]
    kept = [a for a in rows if store.load_records(a.cell_id, a.attack_key) is not None]
    store.close()
    assert {a.attack for a in kept} >= {"mia-threshold", "mia-rmia"}
    for a in kept:
        audit = audit_stored(quickstart, a.cell_id, a.attack_key)
        assert audit.metrics == {k: a.metrics[k] for k in audit.metrics}, a.label


def test_the_interval_holds_the_true_auc_and_a_blind_score_reads_chance():
    scores, truth = separated(1500, 1.0)
    audit = audit_scores(scores, truth)
    m = audit.metrics
    assert m["auc_ci_low"] < norm.cdf(1 / np.sqrt(2)) < m["auc_ci_high"]
    assert m["epsilon_lb"] > 0 and m["tpr@0.001"] is not None


def test_blind_scores_read_chance_as_often_as_the_intervals_promise():
    """Scores that know nothing: the AUC interval holds 0.5 in about 95 % of draws (at least
    34 of 40: below that happens with probability 0.005) and the ε bound certifies nothing
    in at least 36 of 40 (it is valid at 95 %)."""
    truth = np.r_[np.ones(300, bool), np.zeros(300, bool)]
    held, zero = 0, 0
    for seed in range(40):
        m = audit_scores(np.random.default_rng(seed).normal(size=600), truth).metrics
        held += m["auc_ci_low"] < 0.5 < m["auc_ci_high"]
        zero += m["epsilon_lb"] == 0.0
    assert held >= 34 and zero >= 36


def test_groups_are_audited_apart_in_natural_order():
    scores, truth = separated(600, 1.0)
    degree = np.random.default_rng(2).integers(1, 40, truth.size)
    groups = degree_buckets(degree).astype(object)
    groups[truth & (degree == 1)] = "members of degree 1"  # leaves "1" to non-members
    audit = audit_scores(scores, truth, groups=groups)
    assert list(audit.groups) == ["2-3", "4-7", "8-15", "16-31", "32-63"]
    assert audit.skipped == {"1": "only non-members", "members of degree 1": "only members"}
    mine = groups == "4-7"
    alone = audit_scores(scores[mine], truth[mine]).metrics
    assert audit.groups["4-7"] == alone
    frame = audit.to_frame()
    assert list(frame.index) == ["all", *audit.groups]
    assert frame.loc["4-7", "auc"] == alone["auc"]


def test_summary_records_and_report(tmp_path):
    scores, truth = separated(300, 0.5)
    audit = audit_scores(scores, truth, ids=np.arange(600) + 1000, name="my GCN")
    text = audit.summary()
    assert "my GCN" in text and "n/a" in text  # 300 non-members cannot resolve 0.1 % FPR
    assert max(map(len, text.splitlines()[:3])) <= 110
    records = audit.records()
    assert list(records.columns) == ["id", "score", "is_member"]
    assert records["id"].iloc[0] == 1000 and records["is_member"].sum() == 300
    page = audit.report(tmp_path / "audit.html").read_text()
    assert "my GCN" in page and page.count("data:image/png;base64") == 2  # ROC, histograms


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scores": [0.1, float("nan"), 0.3, 0.4]}, r"^scores: expected finite numbers"),
        ({"scores": [[0.1, 0.2], [0.3, 0.4]]}, r"^scores: expected a 1-D array"),
        ({"is_member": [True, False]}, r"^is_member: expected 4 values"),
        ({"is_member": [1, 1, 1, 1]}, r"^is_member: expected both members and non-members"),
        ({"is_member": ["a", "b", "a", "b"]}, r"^is_member: expected booleans"),
        ({"groups": ["a"]}, r"^groups: expected 4 values"),
        ({"delta": 1.5}, r"^delta: expected a number in \[0, 1\)"),
        ({"fprs": (0,)}, r"^fprs: expected false positive rates in \(0, 1\)"),
        ({"groups": ["a", None, "b", "a"]}, r"^groups: expected a label for every record"),
        ({"groups": [1, "1", 1, "1"]}, r"^groups: expected labels that read differently"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(kwargs, message):
    given = {"scores": [0.1, 0.2, 0.3, 0.4], "is_member": [True, False, True, False]}
    given.update(kwargs)
    with pytest.raises(ConfigError, match=message):
        audit_scores(given.pop("scores"), given.pop("is_member"), **given)


def test_the_summary_shows_the_fprs_audited():
    scores, truth = separated(200, 1.0)
    text = audit_scores(scores, truth, fprs=(0.05,)).summary()
    assert "TPR@0.05 FPR" in text and "TPR@0.001" not in text
