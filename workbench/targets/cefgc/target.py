"""CeFGC (Wang et al., KDD 2026): federated graph classification in three communication
rounds through per-client graph diffusion models.

Round 1: each client trains EDP-GNN generators on its training graphs (one per class it
holds; CeFGC*, ``label_channel``, one for all its classes, each class diffused on its own
noise schedule σ_l·c_k) and uploads them. Round 2: the server sends each client every other
client's generators, shuffled, with the initial GIN. Round 3: each client samples synthetic
graphs from what it received (``synthetic_ratio`` × its own training graphs in expectation,
spread over the received (generator, class) pairs: ``copy_plan``), trains the GIN on its own
and the synthetic graphs, stopping when its validation loss has not improved for
``patience`` epochs, and uploads it.
The server averages the GINs once, unweighted (the paper's Eq. 10): the released model.

CeFGC*'s class schedule is fixed, c_k = 1 + k/2 (the paper's emb(k) is not specified; a
learned one could collapse the levels), so the sender's class list travels with the model."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.datasets import GraphDataset
from fgl_workbench.data.federation import Federation, GraphClient
from fgl_workbench.defenses.calibration import require_noise
from fgl_workbench.defenses.dp_sgd import (
    DPSGDConfig,
    private_optimizer,
    steps_for,
    train_graph_epochs_dp,
)
from fgl_workbench.defenses.dp_sgd import ledger_event as dp_sgd_event
from fgl_workbench.defenses.secure_aggregation import KeyHolder, SecureAggConfig, Session
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import ConfigError
from fgl_workbench.models import ModelConfig, ModelSpec
from fgl_workbench.query import GraphQueryAPI
from fgl_workbench.seeding import derive_seed, seed_everything
from fgl_workbench.targets.base import TARGETS, TrainedTarget
from fgl_workbench.targets.cefgc.generator import (
    GeneratorConfig,
    blank_generator,
    client_generators,
    generator_dp_steps,
    generator_sources,
    sample_graphs,
    trainable,
)
from fgl_workbench.targets.cefgc.pairing import (
    PAIRING,
    SIMILARITIES,
    encrypted_gram,
    flatten,
    opened,
    paired_sums,
    partners,
)
from fgl_workbench.targets.fedavg import average_states
from fgl_workbench.targets.training import (
    TrainingRecipe,
    graph_logits,
    score_graph_clients,
    source_aucs,
)
from fgl_workbench.transcript import (
    GENERATIVE_MODEL,
    MODEL_WEIGHTS,
    PUBLIC_KEY,
    SERVER,
    KeepPayloads,
    Transcript,
    client,
)


class CeFGCConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    label_channel: bool = Field(False, description="CeFGC*: one generator per client")
    generator: GeneratorConfig = GeneratorConfig()
    synthetic_ratio: float = Field(1.0, ge=0.0, le=100.0, description="|synthetic| / |local|")
    model: ModelConfig = ModelConfig(arch="gin", hidden=64, layers=3)
    epochs: int = Field(500, ge=1, le=100_000, description="local GIN epochs at most")
    patience: int = Field(30, ge=1, description="epochs without a better validation loss")
    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(5e-4, ge=0.0)
    batch_size: int = Field(32, ge=1, description="the paper: 32")
    pairing: bool = Field(
        False,
        description="CeFGC+ / CeFGC*+: generators encrypted (CKKS), each averaged with "
        "its most similar one before redistribution",
    )
    he: SecureAggConfig = Field(SecureAggConfig(), description="CKKS parameters (pairing)")
    keep_payloads: KeepPayloads = "all"


class CeFGC:
    name = "cefgc"
    level = "graph"
    Config = CeFGCConfig

    def fit(
        self, federation: Federation, config: Any, defenses: Sequence[Any], seed: int
    ) -> TrainedTarget:
        require_noise(self.name, defenses)
        cfg, dp = self._checked(federation, config, defenses)
        ds = federation.dataset
        assert isinstance(ds, GraphDataset)
        seed_everything(derive_seed(seed, "cefgc"))
        gen = seeded_generator(derive_seed(seed, "cefgc/generators"))
        rng = np.random.default_rng(derive_seed(seed, "cefgc/shuffle"))
        clients: tuple[GraphClient, ...] = federation.clients  # type: ignore[assignment]
        transcript = Transcript(cfg.keep_payloads)
        # round 1: generators up; round 2: everyone else's (shuffled) and the initial GIN down
        uploads = [
            client_generators(
                trainable(c.train, cfg.generator), cfg.generator, cfg.label_channel, gen, dp
            )
            for c in clients
        ]
        keys = None
        senders = shuffled_senders(len(clients), rng)
        if cfg.pairing:
            template = blank_generator(cfg.generator, ds.num_features).state_dict()
            received, keys = encrypted_exchange(uploads, transcript, senders, cfg.he, template)
        else:
            received = plain_exchange(uploads, transcript, senders)
        spec = ModelSpec(cfg.model, ds.num_features, ds.num_classes, "graph")
        initial = spec.build()
        for k in range(len(clients)):
            transcript.send(1, SERVER, client(k), MODEL_WEIGHTS, initial.state_dict())
        # round 3: local GINs on own + synthetic graphs up, one unweighted average
        local, synthetic, copies = [], [], 0
        for k, c in enumerate(clients):
            fake = synthesise(received[k], c, cfg, ds.num_features, gen)
            if any(p["models"] for p in received[k]) and trainable(c.train, cfg.generator):
                copies = max_copies(cfg.synthetic_ratio)
            model = self._train(initial, c.train + fake, c.val, cfg, gen, dp)
            transcript.send(2, client(k), SERVER, MODEL_WEIGHTS, model.state_dict())
            local.append(model)
            synthetic.append(len(fake))
        global_model = spec.build()
        equal = np.ones(len(local))
        # one unweighted average (the paper's Eq. 10)
        global_model.load_state_dict(average_states([m.state_dict() for m in local], equal))
        test = score_graph_clients(global_model, clients, "test")
        val = score_graph_clients(global_model, clients, "val")
        utility = {
            **test,
            "val_accuracy": val["accuracy"],
            "synthetic_graphs": float(sum(synthetic)),
            **source_aucs(global_model, clients, ds),
        }
        return TrainedTarget(
            name=self.name,
            level="graph",
            global_model=global_model,
            client_models={},
            spec=spec,
            recipe=TrainingRecipe(
                self.name,
                cfg.model_dump(),
                len(clients),
                sum(len(c.train) for c in clients),
                tuple(defenses),
            ),
            query=GraphQueryAPI(global_model),
            transcript=transcript,
            ledger=self.ledger(cfg, dp, copies),
            utility=utility,
            keys=keys,
            senders=senders,
        )

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """The ledger ``fit`` will write, before training (calibration by ε). Steps are fixed
        (no early stop under DP-SGD); a real graph may get ``max_copies`` copies wherever a
        client has graphs to copy (it copies none only when it received no generator), so
        the real ε is at most this ledger's and equal in practice."""
        cfg, dp = self._checked(federation, config, defenses)
        copyable = any(trainable(c.train, cfg.generator) for c in federation.clients)
        return self.ledger(cfg, dp, max_copies(cfg.synthetic_ratio) if copyable else 0)

    @staticmethod
    def _checked(
        federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> tuple[CeFGCConfig, DPSGDConfig | None]:
        unknown = [d.name for d in defenses if d.name != "dp-sgd"]
        if unknown:
            raise ConfigError(f"defenses: cefgc applies only dp-sgd (got {', '.join(unknown)})")
        dp = next((d.config for d in defenses), None)
        if federation.level != "graph":
            raise ConfigError("datasets: cefgc classifies graphs; the dataset is node-level")
        cfg = config if isinstance(config, CeFGCConfig) else CeFGCConfig(**(config or {}))
        return cfg, dp

    @staticmethod
    def ledger(cfg: CeFGCConfig, dp: DPSGDConfig | None, copies: int) -> PrivacyLedger:
        """DP-SGD: a client's graph enters its generator's training (one generator per class,
        so each graph only its class's) and its GIN's; both are released, so their steps add
        up. Everything else is post-processing: synthetic graphs of a DP generator, the GINs
        trained on them, the average, except the node features a synthetic graph copies from
        a real one: in the GIN's training a real graph is a group of itself and its ``copies``
        (the most ``copy_plan`` can give one graph). Every client runs as many steps."""
        if dp is None:
            return PrivacyLedger()
        gin = dp_sgd_event(dp, steps_for(dp, cfg.epochs), group=copies + 1)
        return PrivacyLedger((dp_sgd_event(dp, generator_dp_steps(cfg.generator, dp)), gin))

    @staticmethod
    def _train(
        initial: nn.Module,
        graphs: list[Data],
        val: list[Data],
        cfg: CeFGCConfig,
        gen,
        dp: DPSGDConfig | None,
    ) -> nn.Module:
        """The GIN from the initial weights, stopped by validation loss (patience); under
        DP-SGD exactly ``epochs`` epochs (choosing weights by the validation loss would use
        private graphs outside the accountant)."""
        model = copy.deepcopy(initial)
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        # synthetic graphs carry only x, edge_index and y: batch every graph as such
        plain = [Data(x=g.x, edge_index=g.edge_index, y=g.y) for g in graphs]
        if dp is not None:
            private = private_optimizer(opt, dp, len(plain), gen)
            train_graph_epochs_dp(model, plain, private, cfg.epochs, dp, gen)
            return model.eval()
        loader = DataLoader(plain, batch_size=cfg.batch_size, shuffle=True, generator=gen)
        val_y = torch.tensor([int(g.y.view(-1)[0]) for g in val], dtype=torch.long)
        best, best_state, waited = float("inf"), copy.deepcopy(model.state_dict()), 0
        for _ in range(cfg.epochs):
            model.train()
            for b in loader:
                opt.zero_grad()
                F.cross_entropy(model(b.x, b.edge_index, b.batch), b.y.view(-1)).backward()
                opt.step()
            if not val:
                continue
            loss = float(F.cross_entropy(graph_logits(model, val), val_y))
            if loss < best:
                best, best_state, waited = loss, copy.deepcopy(model.state_dict()), 0
            else:
                waited += 1
                if waited >= cfg.patience:
                    break
        if val:
            model.load_state_dict(best_state)
        return model.eval()


def synthesise(
    received: list[dict], c: GraphClient, cfg: CeFGCConfig, features: int, gen
) -> list[Data]:
    """About ``synthetic_ratio`` × |own training graphs| synthetic graphs over the received
    (generator, class) pairs, each with the node count and features of one own graph, as
    ``copy_plan`` assigns them."""
    sources = generator_sources(received, cfg.generator, features)
    templates = trainable(c.train, cfg.generator)
    if not sources or not templates:
        return []
    plan = copy_plan(len(templates), len(sources), cfg.synthetic_ratio, gen)
    out: list[Data] = []
    for i, (net, k, scale) in enumerate(sources):
        pick = [templates[j] for j, drawn in enumerate(plan) for s in drawn if s == i]
        if pick:
            out += sample_graphs(net, pick, k, cfg.generator, gen, scale)
    return out


def copy_plan(templates: int, sources: int, ratio: float, gen) -> list[list[int]]:
    """For each own graph, the sources its feature copies are sampled from: ⌊ratio⌋ copies,
    one more with probability ratio − ⌊ratio⌋, on consecutive sources from a random start
    (spread evenly in expectation). Each graph's draws are its own, in graph order, so
    removing one real graph removes its copies and leaves every other graph's as they were:
    in the GIN's training it is a group of itself and at most ``max_copies`` records. (An
    even split of round(ratio × n) cycled over a random order reassigned every copy.)"""
    whole = math.floor(ratio)
    out = []
    for _ in range(templates):
        start, extra = torch.rand(2, generator=gen).tolist()
        count = whole + (extra < ratio - whole)
        out.append([(int(start * sources) + t) % sources for t in range(count)])
    return out


def max_copies(ratio: float) -> int:
    """The most synthetic graphs ``copy_plan`` gives one real graph: ⌈ratio⌉."""
    return math.ceil(ratio)


def shuffled_senders(n: int, rng) -> dict[int, tuple[int, ...]]:
    """The server's shuffle: for each client, every other client in a random order."""
    return {k: tuple(int(j) for j in rng.permutation(n) if j != k) for k in range(n)}


def plain_exchange(
    uploads: list[dict], transcript: Transcript, senders: dict[int, tuple[int, ...]]
) -> list[list[dict]]:
    """Rounds 1 and 2 in the clear: each client's generators up, every other client's down
    (in the order ``senders`` gives)."""
    for k, payload in enumerate(uploads):
        transcript.send(0, client(k), SERVER, GENERATIVE_MODEL, payload)
    received = []
    for k in range(len(uploads)):
        others = [uploads[j] for j in senders[k]]
        transcript.send(1, SERVER, client(k), GENERATIVE_MODEL, others)
        received.append(others)
    return received


def encrypted_exchange(
    uploads: list[dict],
    transcript: Transcript,
    senders: dict[int, tuple[int, ...]],
    he: SecureAggConfig,
    template: dict,
) -> tuple[list[list[dict]], KeyHolder]:
    """Rounds 1 and 2 of CeFGC+ (``pairing``): generators up as CKKS ciphertexts, paired on
    them (``pairing.py``), every other client's paired sums down; receivers decrypt and
    halve (``template``: a generator's state, for its shapes). Client 0 holds the keys'
    public part out to the server (with Galois keys); every client holds the secret key."""
    session = Session.start(he, rotations=True)
    transcript.send(0, client(0), SERVER, PUBLIC_KEY, session.keys.public_context)
    items, pools, owners = [], [], []
    for k, up in enumerate(uploads):
        sealed = {key: session.client.encrypt(flatten(s)) for key, s in up["models"].items()}
        payload = {"classes": up["classes"], "models": sealed}
        transcript.send(0, client(k), SERVER, GENERATIVE_MODEL, payload)
        for key, ciphertext in sealed.items():
            items.append(ciphertext)
            pools.append(key)
            owners.append((k, key))
    gram = encrypted_gram(session.server, items)
    transcript.send(1, SERVER, client(0), SIMILARITIES, gram)
    pairing = partners(session.keys, gram, pools)
    chosen = np.array([-1 if j is None else j for j in pairing])
    transcript.send(1, client(0), SERVER, PAIRING, chosen)
    sums = dict(zip(owners, paired_sums(session.server, items, pairing), strict=True))
    received = []
    for k in range(len(uploads)):
        order = senders[k]
        package = [
            {
                "classes": uploads[j]["classes"],
                "models": {key: sums[(j, key)] for key in uploads[j]["models"]},
            }
            for j in order
        ]
        transcript.send(1, SERVER, client(k), GENERATIVE_MODEL, package)
        received.append([opened(session.keys, p, template) for p in package])
    return received, session.keys


TARGETS.register("cefgc")(CeFGC())
