"""Mini-batch local training with sampled neighbourhoods learns what full-batch training
learns, and replays under the same seeds."""

import torch
import torch.nn.functional as F

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.models.node import NodeGNN
from fgl_workbench.targets.minibatch import neighbour_batches, train_node_minibatch_epochs
from fgl_workbench.targets.training import node_logits


def _train(data, seed: int) -> NodeGNN:
    torch.manual_seed(seed)
    model = NodeGNN("gcn", data.num_features, 16, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(seed)
    train_node_minibatch_epochs(model, data, opt, 20, neighbour_batches(data, [5, 5], 32), gen)
    return model


def test_minibatch_training_fits_the_training_nodes(small_csbm):
    (client,) = build_federation(small_csbm, make_partition(small_csbm, "metis", 1, 0)).clients
    data = client.data
    torch.manual_seed(0)
    untrained = NodeGNN("gcn", data.num_features, 16, int(data.y.max()) + 1)
    model = _train(data, 0)
    train = data.train_mask

    def loss(m):
        return F.cross_entropy(node_logits(m, data)[train], data.y[train]).item()

    assert loss(model) < 0.5 * loss(untrained)


def test_minibatch_training_replays_under_the_same_seeds(small_csbm):
    (client,) = build_federation(small_csbm, make_partition(small_csbm, "metis", 1, 0)).clients
    a, b = _train(client.data, 1), _train(client.data, 1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
