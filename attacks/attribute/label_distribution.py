"""A client's label distribution from the model it uploads (the honest-but-curious server).

For cross-entropy the output bias's gradient is the sum over training records of (p − y), so
one round of local training moves the bias by an amount that depends on how far the model's
predictions are from the client's label fractions (iDLG's observation, turned into fractions
by simulation). The server knows the global model it sent, the training recipe and its
auxiliary pool: it trains the global model locally, as a client would (the recipe's
``local_round``: the target's own step, or an external federation's), on auxiliary subsets
whose label mixture it draws from a Dirichlet, records the bias update of each, and fits a
ridge regression from bias update to label fractions; each client's real update is read
through it. The simulation starts each client's optimizer afresh; a target whose clients keep
their optimizer state across rounds (FedAvg's default Adam) makes the map approximate. With
``adaptive`` the simulated updates go through the upload defenses the recipe names (clip and
noise), so the map is fitted on updates like the ones the server actually receives."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from fgl_workbench.adversary.threat import BackgroundKnowledge, ServerView
from fgl_workbench.attacks.base import ATTACKS, AttackInput, AttackOutput, ThreatModel
from fgl_workbench.attacks.membership.observe import sealed
from fgl_workbench.attacks.metrics import value_fractions
from fgl_workbench.defenses.dp_fedavg import apply_update, client_update, update_vector
from fgl_workbench.defenses.gaussian_upload import privatize
from fgl_workbench.device import seeded_generator
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.seeding import derive_seed
from fgl_workbench.transcript import MODEL_WEIGHTS


class LabelDistributionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    adversary: Literal["server"] = "server"
    simulations: int = Field(48, ge=4, le=1024, description="simulated local rounds")
    concentration: float = Field(0.5, gt=0.0, description="Dirichlet α of simulated mixtures")
    ridge: float = Field(1e-3, ge=0.0, description="L2 penalty of the regression")
    adaptive: bool = Field(
        True,
        description="pass the simulated updates through the upload defenses the recipe names "
        "(clip and noise), as the real ones were",
    )
    reads: Literal["bias", "output-layer"] = Field(
        "output-layer",
        description="bias: the output bias's update alone (iDLG); output-layer: also each "
        "class's row sum of the output weight's update",
    )


def last_round_updates(
    view: ServerView,
) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """The global model the server sent in the last round it kept, and each client's upload
    of that round."""
    sent = [m for m in view.sent if m.kind == MODEL_WEIGHTS and m.payload is not None]
    got = [m for m in view.received if m.kind == MODEL_WEIGHTS and m.payload is not None]
    reason = sealed(view.received)
    if not got and reason is not None:
        raise NotApplicableError(reason)
    if not sent or not got:
        raise NotApplicableError("the server kept no model it sent and no upload it received")
    last = max(m.round for m in got)
    global_state = next(m.payload for m in reversed(sent) if m.round == last)
    uploads = {m.sender: m.payload for m in got if m.round == last}
    return global_state, uploads


def output_bias(state: dict[str, torch.Tensor], num_classes: int) -> str:
    """Name of the output layer's bias: the last parameter of shape (classes,)."""
    names = [k for k, v in state.items() if tuple(v.shape) == (num_classes,)]
    if not names:
        raise NotApplicableError("the uploaded model has no output bias to read")
    return names[-1]


def update_features(
    new: dict[str, torch.Tensor], old: dict[str, torch.Tensor], key: str, reads: str
) -> np.ndarray:
    """What the attack reads of one update: the output bias's change, and with
    ``output-layer`` each class's row sum of the output weight's change (the last matrix
    with one row per class: ``convs.1.lin.weight`` beside ``convs.1.bias`` in PyG's GCN)."""
    bias = (new[key] - old[key]).numpy(force=True)
    if reads == "bias":
        return bias
    weights = [k for k, v in new.items() if v.dim() == 2 and v.shape[0] == bias.size]
    if not weights:
        return bias
    w = weights[-1]
    return np.concatenate([bias, (new[w] - old[w]).sum(1).numpy(force=True)])


UPLOAD_DEFENSES = ("gaussian-upload", "dp-fedavg")  # those that can change what is uploaded


def defended_upload(
    state: dict[str, torch.Tensor],
    reference: dict[str, torch.Tensor],
    defenses: tuple,
    noise: torch.Generator,
) -> dict[str, torch.Tensor]:
    """The upload a client with these defenses would send: clipped and noised by the Gaussian
    mechanism on uploads, or by local DP-FedAvg; unchanged by any other defense."""
    for d in defenses:
        if d.name == "gaussian-upload":
            state = apply_update(
                reference, privatize(update_vector(state, reference), d.config, noise)
            )
        elif d.name == "dp-fedavg" and d.config.mode == "local":
            state = apply_update(reference, client_update(state, reference, d.config, noise))
    return state


class LabelDistribution:
    name = "label-distribution"
    family = "distribution"
    threat = ThreatModel(
        sees="each client's last-round model update",
        knows="the auxiliary pool (simulated rounds), the training recipe",
    )
    Config = LabelDistributionConfig

    def run(self, inp: AttackInput, config: LabelDistributionConfig, seed: int) -> AttackOutput:
        view, knowledge = inp.view, inp.knowledge
        if not isinstance(view, ServerView) or knowledge.graph is None:
            raise NotApplicableError("label-distribution: needs the server's view at node level")
        clients = np.asarray(inp.candidates)
        c = view.num_classes
        global_state, uploads = last_round_updates(view)
        key = output_bias(global_state, c)
        rng = np.random.default_rng(seed)
        by_class = [knowledge.aux_ids[knowledge.aux_labels == k] for k in range(c)]
        labels = np.zeros(knowledge.graph.num_nodes, dtype=np.int64)
        labels[knowledge.aux_ids] = knowledge.aux_labels
        deltas, fractions = [], []
        for i in range(config.simulations):
            delta, frac = _simulate(
                global_state,
                key,
                knowledge,
                view,
                config,
                rng,
                by_class,
                labels,
                derive_seed(seed, "simulation", i),
            )
            deltas.append(delta)
            fractions.append(frac)
        x = np.hstack([np.stack(deltas), np.ones((len(deltas), 1))])
        w = np.linalg.solve(x.T @ x + config.ridge * np.eye(x.shape[1]), x.T @ np.stack(fractions))
        prior = value_fractions(knowledge.aux_labels, c)
        out = np.tile(prior, (clients.size, 1))
        for i, k in enumerate(clients.tolist()):
            upload = uploads.get(f"client:{k}")
            if upload is None:
                continue  # not chosen in the last round: the prior is all the server has
            delta = update_features(upload, global_state, key, config.reads)
            guess = np.clip(np.append(delta, 1.0) @ w, 0.0, None)
            if guess.sum() > 0:
                out[i] = guess / guess.sum()
        return AttackOutput(out, details={"simulations": config.simulations})


def _simulate(
    global_state: dict[str, torch.Tensor],
    key: str,
    knowledge: BackgroundKnowledge,
    view: ServerView,
    config: LabelDistributionConfig,
    rng: np.random.Generator,
    by_class: list[np.ndarray],
    labels: np.ndarray,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """One local round (the recipe's ``local_round``, seeded by ``seed``) on an auxiliary
    subset of a Dirichlet label mixture, as large as an average client's training set: (what
    the attack reads of the update, the subset's label fractions). ``by_class``: the pool's
    nodes of each class; ``labels``: the pool's labels by node id (built once for all
    simulations)."""
    recipe, c = knowledge.recipe, view.num_classes
    size = max(8, min(recipe.train_size // max(recipe.num_clients, 1), knowledge.aux_ids.size))
    mix = rng.dirichlet(np.full(c, config.concentration))
    weights = np.array([mix[k] if by_class[k].size else 0.0 for k in range(c)])
    counts = rng.multinomial(size, weights / weights.sum())
    ids = np.concatenate(
        [rng.choice(by_class[k], counts[k], replace=counts[k] > by_class[k].size) for k in range(c)]
    )
    ids = np.unique(ids)
    graph = knowledge.graph
    edge_index, _ = subgraph(
        torch.as_tensor(ids), graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes
    )
    y = torch.as_tensor(labels[ids])
    data = Data(
        x=graph.x[torch.as_tensor(ids)],
        edge_index=edge_index,
        y=y,
        train_mask=torch.ones(ids.size, dtype=torch.bool),
    )
    model = view.spec.build()
    model.load_state_dict(global_state)
    state = recipe.local_round(model, data, seed).state_dict()
    uploads = [d for d in recipe.defenses if d.name in UPLOAD_DEFENSES]
    if config.adaptive and uploads:
        noise = seeded_generator(int(rng.integers(2**31)))
        state = defended_upload(state, global_state, tuple(uploads), noise)
    delta = update_features(state, global_state, key, config.reads)
    return delta, value_fractions(y.numpy(force=True), c)


ATTACKS.register("label-distribution")(LabelDistribution())
