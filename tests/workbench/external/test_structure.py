"""audit_model's link stealing and attribute inference on a user's plain PyG models on Cora:
what they find, that they are asked as the workbench asks its own targets (the truth never in
what the attack receives), and how they are refused."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_model import GCN, GIN, train, train_graphs
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.attacks import ATTACKS
from fgl_workbench.attacks.attribute.inference import known_values
from fgl_workbench.attacks.attributes import attribute_values
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.errors import ConfigError
from fgl_workbench.external import audit_model, structure
from fgl_workbench.external.model import DEFAULT_ATTACKS, NODE_ATTACKS

LINKS = {"name": "link-stealing"}
LABEL = {"name": "attribute-inference"}
COLUMN = 1177  # Cora's most common word: in 40 % of the papers
FEATURE = {"name": "attribute-inference", "params": {"attribute": f"feature:{COLUMN}"}}


class MLP(nn.Module):
    """A model that ignores the edges it is given: its posteriors correlate for linked nodes
    through homophily alone."""

    def __init__(self) -> None:
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(1433, 16), nn.Linear(16, 7)

    def forward(self, x, edge_index):
        return self.lin2(F.dropout(F.relu(self.lin1(x)), 0.5, self.training))


@pytest.fixture(scope="module")
def members(cora):
    return cora.public_split[0]  # 140 training nodes, 20 of each class


def trained(factory, cora, members):
    mask = torch.zeros(cora.data.num_nodes, dtype=torch.bool)
    mask[members] = True
    return train(factory, cora.data, mask, 0).eval()


@pytest.fixture(scope="module")
def gcn_audit(cora, members):
    features = {"name": "link-stealing", "params": {"signal": "features"}}
    attacks = [LINKS, features, LABEL]
    return audit_model(trained(GCN, cora, members), cora.data, members, train_fn=train,
                       attacks=attacks, name="my GCN")  # fmt: skip


def test_link_stealing_reads_the_edges_a_gcn_aggregates_over(gcn_audit, cora, members):
    """He et al.'s posterior correlation tells the GCN's edges from same-graph non-edges
    well above chance, and above both what the features alone tell (the target-independent
    baseline) and what a model that ignores the edges gives away through homophily."""
    mlp_audit = audit_model(trained(MLP, cora, members), cora.data, members, train_fn=train,
                            attacks=[LINKS])  # fmt: skip
    gcn = gcn_audit.attacks["link-stealing"].metrics
    features = gcn_audit.attacks["link-stealing(signal=features)"].metrics
    mlp = mlp_audit.attacks["link-stealing"].metrics
    assert gcn["auc_ci_low"] > 0.5 and mlp["auc_ci_low"] > 0.5
    assert gcn["auc_ci_low"] > max(features["auc_ci_high"], mlp["auc_ci_high"]), (gcn, mlp)
    assert {"auc_uniform", "auc_intra", "average_precision"} <= gcn.keys()
    assert 1900 < gcn["members"] == gcn["nonmembers"] <= 2000  # the challenge's cap on each
    summary = gcn_audit.summary()
    pairs = int(gcn["members"])
    assert f"\n{pairs} edges, {pairs} non-edges\n" in summary  # both link attacks asked alike
    assert "140 members" not in summary  # no membership attack ran
    assert f"link-stealing: AUC {gcn['auc_uniform']:.3f} against uniform non-edges" in summary


def test_attribute_inference_of_the_label_beats_the_prior(gcn_audit):
    """The label of the nodes outside the adversary's pool (here the 140 members and their
    class-matched non-members), from the posteriors, against always guessing the pool's most
    common class: above it with the whole 95 % interval."""
    (label,) = gcn_audit.inferences.values()
    m = label.metrics
    assert m["accuracy_ci_low"] > m["accuracy_baseline"] + 0.3, m
    assert m["accuracy_ci_low"] < m["accuracy"] < m["accuracy_ci_high"]
    assert label.count == "280 nodes"
    assert "attribute-inference: accuracy 0." in gcn_audit.summary()


def test_the_report_has_the_edges_and_the_inferred_values(gcn_audit, tmp_path):
    page = gcn_audit.report(tmp_path / "audit.html").read_text()
    assert "edges and non-edges: score histograms" in page and "Inferred values" in page
    assert "accuracy_baseline" not in page and "macro_f1" in page
    assert page.count("data:image/png;base64") == 4  # ROC and histograms of each link attack


def reachable(obj, seen=None):
    """Every array and tensor an attack can reach from ``obj``: fields, mapping values,
    sequence items, a Data's attributes (the model's own weights aside)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, nn.Module | str | bytes | int | float):
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor | np.ndarray):
        yield obj.numpy(force=True) if isinstance(obj, torch.Tensor) else obj
        return
    if isinstance(obj, Data):
        children = [v for _, v in obj]
    elif isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, list | tuple | set):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
    for child in children:
        yield from reachable(child, seen)


def received(monkeypatch, name):
    """What ``name`` is run with, kept as the audit hands it over."""
    attack = ATTACKS.get(name)
    inputs = []
    run = attack.run

    def keep(inp, config, seed):
        inputs.append(inp)
        return run(inp, config, seed)

    monkeypatch.setattr(attack, "run", keep)
    return inputs


def test_the_truth_never_reaches_the_attacks(monkeypatch, cora, members):
    """Walking all an attack is handed (view, knowledge, candidates): no asked edge in any
    edge list (the known fifth of the edges is there), the hidden column zero outside the
    adversary's pool, and no node's label but the pool's."""
    data, n = cora.data, cora.data.num_nodes
    links, attributes = (
        received(monkeypatch, "link-stealing"),
        received(monkeypatch, "attribute-inference"),
    )
    drawn, draw = [], structure.link_challenge
    monkeypatch.setattr(structure, "link_challenge", lambda *a: drawn.append(draw(*a)) or drawn[0])
    teller = {"name": "link-teller"}  # probes a deployment: none here to probe
    hidden = {"name": "link-stealing", "params": {"signal": "embedding"}}  # not given out
    audit = audit_model(
        GCN(), data, members, train_fn=train, attacks=[LINKS, LABEL, FEATURE, teller, hidden]
    )
    assert audit.not_applicable == {
        "link-teller": "link-teller needs node pairs and a deployment to probe",
        "link-stealing(signal=embedding)": "signal 'embedding': the audit reads your model's "
        "answers (posteriors), not its hidden layer",
    }

    (inp,) = links
    names = drawn[0].names  # the attack reads every node under its pseudonym
    src, dst = names[data.edge_index.numpy()]
    edges = set((src * n + dst).tolist())
    pairs = inp.candidates
    asked = set((pairs.src * n + pairs.dst).tolist()) & edges
    assert 1900 < len(asked) <= 2000
    lists = [a for a in reachable(inp) if a.ndim == 2 and a.shape[0] == 2 and a.dtype.kind == "i"]
    assert lists and all(not set((a[0] * n + a[1]).tolist()) & asked for a in lists)
    known = inp.knowledge.graph.edge_index.numpy()
    assert known.shape[1] == 2 * int(0.2 * data.edge_index.shape[1] / 2)  # both directions
    assert not any(a.dtype == bool for a in reachable(inp))  # no is_edge

    label, feature = attributes
    y, aux = data.y.numpy(), label.knowledge.aux_ids
    assert isinstance(label.candidates, np.ndarray) and label.candidates.dtype.kind == "i"
    assert not set(label.candidates.tolist()) & set(aux.tolist())
    for a in reachable(label):
        assert not (a.shape == (n,) and np.array_equal(a, y)), "every node's label"
        assert not (a.shape == label.candidates.shape and np.array_equal(a, y[label.candidates]))
    outside = np.setdiff1d(np.arange(n), aux)
    assert data.x[outside, COLUMN].sum() > 100  # there to hide
    blanked = [a for a in reachable(feature) if a.ndim == 2 and a.shape == tuple(data.x.shape)]
    assert blanked and all((a[outside, COLUMN] == 0).all() for a in blanked)
    np.testing.assert_array_equal(blanked[0][aux, COLUMN], data.x[aux, COLUMN].numpy())


def test_at_graph_level_they_are_named_not_applicable():
    """A list of graphs has no node or edge the audit asks about: said per attack, the
    membership attack still runs; the graph-level default is membership only."""

    graphs = load_dataset("synthetic-graphs", {"num_graphs": 60, "num_features": 8}).graphs
    mask = torch.arange(60) < 20
    gin = train_graphs(lambda: GIN(8, 2, hidden=16, layers=1), graphs, mask, 0)
    threshold = {"name": "mia-threshold", "params": {"signal": "loss"}}
    audit = audit_model(gin, graphs, mask, train_fn=train_graphs, attacks=[threshold, LINKS, LABEL])
    assert list(audit.attacks) == ["mia-threshold(signal=loss)"]
    assert audit.not_applicable == {
        "link-stealing": "link attacks ask about the nodes of one graph: node level only",
        "attribute-inference": "attribute attacks ask about the nodes of one graph: node level "
        "only",
    }
    names = {a["name"] for a in NODE_ATTACKS} - {a["name"] for a in DEFAULT_ATTACKS}
    assert names == {"link-stealing", "attribute-inference"}


@pytest.mark.parametrize(
    "attack, message",
    [
        (
            {"name": "attribute-inference", "params": {"attribute": "feature:5000"}},
            r"^attacks\[\]\.params\.attribute: feature column 5000 does not exist \(data has 1433",
        ),
        (
            {"name": "attribute-inference", "params": {"attribute": "age"}},
            r"^attacks\[0\]\.params\.attribute: String should match pattern",
        ),
        (
            {"name": "link-stealing", "params": {"distance": "hamming"}},
            r"^attacks\[0\]\.params\.distance: Input should be",
        ),
        (
            {"name": "statistics-attribute-inference"},
            r"^attacks\[0\]\.params\.adversary: this audit observes as the querier",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_field(cora, attack, message):
    with pytest.raises(ConfigError, match=message):
        audit_model(GCN(), cora.data, [0, 1], train_fn=train, attacks=[attack])


def test_a_continuous_column_is_cut_where_the_adversary_can_cut_it(cora, members, monkeypatch):
    """A non-binary hidden column is binarised at the median of the pool's values, for the
    adversary's labels and the scorer's truth alike: a pool of under half the nodes is not
    refused (the hidden column is zero elsewhere), and the two cuts agree on the pool."""
    n = cora.data.num_nodes
    x = cora.data.x.clone()
    x[:, 0] = torch.rand(n, generator=torch.Generator().manual_seed(0)) + (cora.data.y == 3)
    data = Data(x=x, edge_index=cora.data.edge_index, y=cora.data.y)
    mask = torch.zeros(n, dtype=torch.bool)
    mask[torch.as_tensor(members)] = True
    model = train(GCN, data, mask, 0)
    rest = np.setdiff1d(np.arange(n), members)
    pool = rest[:400]
    inputs = received(monkeypatch, "attribute-inference")
    column = {"name": "attribute-inference", "params": {"attribute": "feature:0"}}
    audit = audit_model(
        model, data, members, nonmembers=rest[-140:], aux=pool, train_fn=train, attacks=[column]
    )
    m = audit.inferences["attribute-inference(attribute=feature:0)"].metrics
    assert m["accuracy_ci_low"] > m["accuracy_baseline"]  # label-linked: read from the answers
    known = known_values(inputs[0].knowledge, "feature:0")
    assert np.array_equal(known, attribute_values(x[:, 0].numpy(), pool)[pool])
