"""mia-quantile against CeFGC's shared generators: a curious client regresses the denoising
loss a received generator gives a graph on the graph itself, fitted on graphs it knows no
other client holds (the auxiliary pool and its own), so each graph is judged against its own
expected fit: it runs on what the client received, holds chance on a generator that never
saw either side, and scores graphs above the size cap lowest."""

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.threat import BackgroundKnowledge, ClientView
from fgl_workbench.attacks import ATTACKS, AttackInput, Candidates
from fgl_workbench.attacks.membership.quantile import QuantileConfig
from fgl_workbench.attacks.metrics import auc_interval
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import GraphClient
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.cefgc.generator import GeneratorConfig, train_generator
from fgl_workbench.transcript import GENERATIVE_MODEL, Message

ATTACK = ATTACKS.get("mia-quantile")
OVERFIT = GeneratorConfig(epochs=150, max_nodes=20, channels=(2, 2), batch_size=8, lr=5e-3)
FAST = GeneratorConfig(epochs=2, max_nodes=20, channels=(2, 2), sigmas=(0.2, 0.8, 1.6))
QUICK = QuantileConfig(adversary="client", draws=2, epochs=50, hidden=16)


@pytest.fixture(scope="module")
def graphs(data_root):
    ds = load_dataset("MUTAG", root=data_root)
    small = [g for g in ds.graphs if int(g.y) == 1 and g.num_nodes <= 20]
    big = next(g for g in ds.graphs if int(g.y) == 1 and g.num_nodes > 20)
    # members, non-members, the client's own, its auxiliary pool, one graph above the cap
    return small[:12], small[12:24], small[24:40], small[40:60], big


def _input(generator, members, others, own, aux, cfg, extra=()):
    payload = {"classes": torch.tensor([1]), "models": {1: generator.state_dict()}}
    received = (Message(1, "server", "client:0", GENERATIVE_MODEL, 0, [payload]),)
    view = ClientView("graph", 2, 0, received, GraphClient(0, list(own), [], []), None, ())
    recipe = type("Recipe", (), {"config": {"generator": cfg.model_dump()}})()
    labels = np.array([int(g.y) for g in aux], int)
    know = BackgroundKnowledge("graph", np.arange(len(aux)), labels, tuple(aux), None, None, recipe)
    cands = [*members, *others, *extra]
    c = Candidates("graph", np.arange(len(cands)), np.ones(len(cands), int), tuple(cands))
    truth = np.array([1] * len(members) + [0] * (len(cands) - len(members)), bool)
    return AttackInput(view, know, c), truth


def test_runs_on_received_generators_and_scores_big_graphs_lowest(graphs):
    members, others, own, aux, big = graphs
    generator = train_generator(members, FAST, torch.Generator().manual_seed(0))
    inp, _ = _input(generator, members[:4], others[:4], own, aux, FAST, extra=(big,))
    out = ATTACK.run(inp, QUICK, 0)
    assert out.scores.shape == (9,) and np.isfinite(out.scores).all()
    assert out.scores[-1] < out.scores[:-1].min()  # above max_nodes: never trained on
    assert np.isfinite(out.threshold)


def test_a_pool_too_small_is_refused(graphs):
    members, others, _, aux, _ = graphs
    generator = train_generator(members, FAST, torch.Generator().manual_seed(0))
    inp, _ = _input(generator, members[:2], others[:2], (), aux[:5], FAST)
    with pytest.raises(NotApplicableError, match="at least 10 records"):
        ATTACK.run(inp, QUICK, 0)


@pytest.mark.slow  # a generator of 150 epochs: about 40 s
def test_holds_chance_on_a_generator_that_saw_neither_side(graphs):
    """A generator trained on other graphs of the same law: members and non-members alike
    unseen. (No planted test passes reliably at this size: on an overfitted generator of 12
    or 8 graphs the AUC ran 0.49–0.58 over runs, its interval ±0.2 wide; the raw loss
    0.59–0.60. Measured on the CeFGC suite instead, docs/attacks.md.)"""
    members, others, own, aux, _ = graphs
    stranger = train_generator(aux[:12], OVERFIT, torch.Generator().manual_seed(1))
    inp, truth = _input(stranger, members, others, own, aux[12:], OVERFIT)
    cfg = QuantileConfig(adversary="client", draws=4)
    low, high = auc_interval(ATTACK.run(inp, cfg, 0).scores, truth)
    assert low < 0.5 < high, (low, high)
