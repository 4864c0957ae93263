import numpy as np
import pytest
import torch

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.models import num_parameters
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import SERVER, Transcript, client, payload_nbytes


@pytest.mark.parametrize(("fraction", "per_round"), [(1.0, 4), (0.5, 2)])
def test_fedavg_bytes_equal_parameters_times_four_times_messages(small_csbm, fraction, per_round):
    fed = build_federation(small_csbm, make_partition(small_csbm, "metis", 4, seed=0))
    trained = TARGETS.get("fedavg").fit(fed, {"rounds": 3, "client_fraction": fraction}, [], 0)
    params = num_parameters(trained.global_model)
    messages = trained.transcript.messages
    assert len(messages) == 3 * per_round * 2
    assert all(m.nbytes == params * 4 for m in messages)
    totals = trained.transcript.total_bytes()
    assert totals == {
        "up": params * 4 * 3 * per_round,
        "down": params * 4 * 3 * per_round,
        "peer": 0,
    }
    assert len(trained.transcript.received_by(SERVER)) == 3 * per_round
    per_round_bytes = trained.transcript.bytes_per_round()
    assert sorted(per_round_bytes) == [0, 1, 2]


def test_last_round_retention_keeps_metadata_and_final_payloads():
    t = Transcript("last_round")
    for r in range(3):
        t.send(r, client(0), SERVER, "update", torch.ones(5))
    assert [m.payload is None for m in t.messages] == [True, True, False]
    assert [m.nbytes for m in t.messages] == [20, 20, 20]


def test_always_kept_kinds_keep_every_rounds_payload():
    t = Transcript("last_round", always_keep={"embeddings"})
    for r in range(3):
        t.send(r, client(0), SERVER, "update", torch.ones(5))
        t.send(r, client(0), SERVER, "embeddings", torch.ones(2))
    kept = [(m.kind, m.payload is not None) for m in t.messages]
    assert kept == [("update", False), ("embeddings", True)] * 2 + [
        ("update", True),
        ("embeddings", True),
    ]


@pytest.mark.parametrize("keep", ["last_round", "first_and_last"])
def test_ten_thousand_rounds_look_at_each_message_once(monkeypatch, keep):
    """Recording stays linear in the rounds: each message's payload is kept or stripped once,
    not re-examined at every later round (the whole list was rebuilt per round: O(R²·C))."""
    import fgl_workbench.transcript as transcript

    rounds, clients = 10_000, 3
    messages = rounds * 2 * clients
    looked = 0
    strip = transcript._strip

    def counted(m):
        nonlocal looked
        looked += 1
        if looked > messages:  # fail at once rather than after R² steps
            raise AssertionError(f"{looked} payload checks for {messages} messages")
        return strip(m)

    monkeypatch.setattr(transcript, "_strip", counted)
    t = Transcript(keep)
    payload = torch.ones(1)
    for r in range(rounds):
        t.broadcast(r, SERVER, [client(k) for k in range(clients)], "model_weights", payload)
        for k in range(clients):
            t.send(r, client(k), SERVER, "update", payload)
    kept = {m.round for m in t.messages if m.payload is not None}
    assert len(t.messages) == messages
    assert kept == ({0} if keep == "first_and_last" else set()) | {rounds - 1}


def test_payloads_are_snapshots():
    t = Transcript("all")
    w = torch.zeros(3)
    t.send(0, client(1), SERVER, "update", {"w": w})
    w += 1
    assert torch.equal(t.messages[0].payload["w"], torch.zeros(3))


def test_payload_sizes():
    assert payload_nbytes({"a": torch.zeros(3, dtype=torch.float64), "b": [np.zeros(2)]}) == 40
    assert payload_nbytes(b"abcd") == 4
    with pytest.raises(TypeError):
        payload_nbytes(object())


def test_broadcast_records_one_message_per_receiver_with_one_snapshot():
    t = Transcript("all")
    w = torch.ones(4)
    msgs = t.broadcast(0, SERVER, [client(0), client(1), client(2)], "model_weights", w)
    assert [m.receiver for m in t.messages] == ["client:0", "client:1", "client:2"]
    assert all(m.nbytes == 16 for m in msgs)
    assert msgs[0].payload is msgs[2].payload  # shared, not copied three times
    w += 1
    assert torch.equal(msgs[1].payload, torch.ones(4))
