"""mia-quantile against CeFGC's shared generators: a curious client regresses the denoising
loss a received generator gives a graph on the graph itself, fitted on graphs it knows no
other client holds (the auxiliary pool and its own), so each graph is judged against its own
expected fit: it runs on what the client received, holds chance on a generator that never
saw either side, and scores graphs above the size cap lowest. A trained toy generator does not
memorise reliably, so the planted test plants memorisation by hand (``Memoriser``: a score
network that denoises its members better by construction), received and read the way CeFGC's
generators are."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from torch import nn
from torch_geometric.data import Data

from fgl_workbench.adversary.threat import BackgroundKnowledge, ClientView
from fgl_workbench.attacks import ATTACKS, AttackInput, Candidates
from fgl_workbench.attacks.membership.quantile import QuantileConfig
from fgl_workbench.attacks.metrics import auc_interval
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.data.federation import GraphClient
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.targets.cefgc.generator import GeneratorConfig, dense, train_generator
from fgl_workbench.targets.cefgc.score_network import pair_mask
from fgl_workbench.transcript import GENERATIVE_MODEL, Message

ATTACK = ATTACKS.get("mia-quantile")
# the modules that build received generators (a package attribute shadows the second's name)
READERS = [
    importlib.import_module(m)
    for m in ("fgl_workbench.attacks.generators", "fgl_workbench.targets.cefgc.generator")
]
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


class Memoriser(nn.Module):
    """A planted generator: the DSM-optimal denoiser of the graphs it memorised, shrunk
    halfway to the population's edge density. On a memorised graph it answers
    −(Â − (½A + ½ρ))/σ², on any other −(Â − ρ)/σ², so a member's denoising loss is exactly a
    quarter of what the same graph would have as a non-member (the noise cancels). It
    recognises a graph by its node features, which are continuous, hence unique."""

    def __init__(self, cfg: GeneratorConfig, features: int, count: int) -> None:
        super().__init__()
        n = cfg.max_nodes
        self.register_buffer("adj", torch.zeros(count, n, n))
        self.register_buffer("x", torch.zeros(count, n, features))
        self.register_buffer("sizes", torch.zeros(count, dtype=torch.long))
        self.register_buffer("sigmas", torch.tensor(cfg.sigmas))
        self.register_buffer("rho", torch.tensor(0.0))

    def memorise(self, graphs: list[Data]) -> Memoriser:
        adj, x, mask = dense(graphs, self.adj.shape[1])
        self.adj, self.x, self.sizes = adj, x, mask.sum(1)
        self.rho = adj.sum() / pair_mask(mask).sum()
        return self

    def forward(self, adj, x, mask, level):
        template = torch.full_like(adj, float(self.rho))
        for b, n in enumerate(mask.sum(1).tolist()):
            for m in np.flatnonzero(self.sizes.numpy() == n):
                if torch.equal(self.x[m, :n], x[b, :n]):
                    template[b, :n, :n] = (self.adj[m, :n, :n] + self.rho) / 2
        sigma = self.sigmas[level].view(-1, 1, 1)
        return -(adj - template) / sigma**2 * pair_mask(mask)


PLANTED = GeneratorConfig(max_nodes=12, channels=(2, 2), sigmas=(0.2, 0.8, 1.6))


def _random_graphs(count: int, seed: int) -> list[Data]:
    """Erdős–Rényi graphs of 6–12 nodes (p = 0.3) with Gaussian node features, class 1."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n = int(torch.randint(6, PLANTED.max_nodes + 1, (1,), generator=gen))
        upper = (torch.rand(n, n, generator=gen) < 0.3).triu(1)
        edge_index = (upper | upper.T).nonzero().T
        out.append(
            Data(
                x=torch.randn(n, 3, generator=gen),
                edge_index=edge_index,
                y=torch.ones(1, dtype=torch.long),
                num_nodes=n,
            )
        )
    return out


@pytest.fixture
def memoriser(monkeypatch):
    """Builds every received generator as a ``Memoriser`` of ``count`` graphs (where the
    attack builds an EDP network of the recipe's shapes, then loads the received weights),
    and returns what memorises ``graphs``."""
    count = 24

    def blank(cfg: GeneratorConfig, features: int) -> Memoriser:
        return Memoriser(cfg, features, count)

    for module in READERS:
        monkeypatch.setattr(module, "blank_generator", blank)
    return lambda graphs: blank(PLANTED, 3).memorise(graphs[:count])


PLANTED_ATTACK = QuantileConfig(adversary="client", draws=1, epochs=100, hidden=16)


def test_planted_memorisation_is_found(memoriser):
    """The received generator fits its 24 members four times better than it would fit them
    as non-members: the AUC interval must lie above 0.75 (it is [1, 1]; with the signal's
    sign flipped it is [0, 0], with the scores shuffled [0.45, 0.78], and the test fails)."""
    graphs = _random_graphs(24 + 24 + 10 + 30, seed=0)
    members, others, own, aux = graphs[:24], graphs[24:48], graphs[48:58], graphs[58:]
    inp, truth = _input(memoriser(members), members, others, own, aux, PLANTED)
    low, high = auc_interval(ATTACK.run(inp, PLANTED_ATTACK, 0).scores, truth)
    assert low > 0.75, (low, high)


def test_planted_memoriser_of_strangers_holds_chance(memoriser):
    """The same generator memorising 24 graphs that are neither members nor non-members: the
    candidates' losses depend on their own graphs only, so the interval holds 0.5 (it is
    [0.34, 0.67])."""
    graphs = _random_graphs(24 + 24 + 24 + 10 + 30, seed=1)
    members, others, strangers = graphs[:24], graphs[24:48], graphs[48:72]
    own, aux = graphs[72:82], graphs[82:]
    inp, truth = _input(memoriser(strangers), members, others, own, aux, PLANTED)
    low, high = auc_interval(ATTACK.run(inp, PLANTED_ATTACK, 0).scores, truth)
    assert low < 0.5 < high, (low, high)
