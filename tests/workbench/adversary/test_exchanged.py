"""The server's record of exchanged embeddings: a node's last release or the mean of its
releases, every release kept, and a clear refusal for nodes never exchanged."""

import numpy as np
import pytest
import torch

from fgl_workbench.adversary.exchanged import exchanged_embeddings
from fgl_workbench.errors import NotApplicableError
from fgl_workbench.transcript import EMBEDDINGS, SERVER, Transcript, client


def _transcript() -> Transcript:
    t = Transcript("last_round", always_keep={EMBEDDINGS})
    t.send(0, client(0), SERVER, EMBEDDINGS, {"global_id": torch.tensor([3, 5]), "h": torch.eye(2)})
    t.send(0, client(0), SERVER, "model_weights", torch.zeros(4))
    t.send(
        1, client(1), SERVER, EMBEDDINGS, {"global_id": torch.tensor([3]), "h": torch.ones(1, 2)}
    )
    return t


def test_last_and_mean_of_the_releases():
    received = _transcript().received_by(SERVER)
    last = exchanged_embeddings(received, normalised=False)
    np.testing.assert_array_equal(last.nodes, [3, 5])
    np.testing.assert_array_equal(last.release_counts(np.array([3, 5])), [2, 1])
    torch.testing.assert_close(last.embeddings(np.array([5, 3])), torch.tensor([[0.0, 1], [1, 1]]))
    mean = exchanged_embeddings(received, normalised=False, combine="mean")
    torch.testing.assert_close(
        mean.embeddings(np.array([3, 5])), torch.tensor([[1.0, 0.5], [0, 1]])
    )


def test_nodes_never_exchanged_and_targets_that_exchange_nothing_are_refused():
    last = exchanged_embeddings(_transcript().received_by(SERVER), normalised=True)
    with pytest.raises(NotApplicableError, match="never exchanged"):
        last.embeddings(np.array([3, 4]))
    t = Transcript()
    t.send(0, client(0), SERVER, "model_weights", torch.zeros(4))
    with pytest.raises(NotApplicableError, match="exchanges no node embeddings"):
        exchanged_embeddings(t.received_by(SERVER), normalised=False)
