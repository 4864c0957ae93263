"""SecAgg with pairwise masks: the masks cancel in the ring sum, one masked vector is uniform
on the ring whatever it carries, the sum over survivors is exact with up to n − t dropouts and
the round aborts beyond, the keys come from the OS, and the transcript carries every byte."""

import contextlib

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy.stats import kstest

from fgl_workbench.defenses.masked_aggregation import (
    KEY_BYTES,
    KEY_SHARES,
    UNMASK_SHARES,
    AggregationAborted,
    MaskedAggConfig,
    SecAggClient,
    agree,
    decode,
    dropouts,
    encode,
    prg,
    secure_sum,
    server_sum,
    shamir_join,
    shamir_split,
)
from fgl_workbench.errors import ConfigError
from fgl_workbench.transcript import MASKED_STATISTICS, SERVER, Transcript, client

CFG = MaskedAggConfig(fraction_bits=24)
STEP = 2.0**-24


def inputs(k, size=300, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 50, size) for _ in range(k)]


def grid(v):
    return np.round(v / STEP) * STEP


def test_masks_cancel_in_the_sum():
    vectors = inputs(5)
    transcript = Transcript("all")
    total, survivors = secure_sum(vectors, CFG, transcript)
    assert survivors == (0, 1, 2, 3, 4)
    np.testing.assert_array_equal(total, np.sum([grid(v) for v in vectors], 0))
    masked = [m.payload for m in transcript.messages if m.kind == MASKED_STATISTICS]
    assert not np.array_equal(masked[0], encode(vectors[0], CFG, 5))


def test_the_old_failure_one_dropout_is_recovered_exactly():
    vectors = [np.array([1.0]), np.array([2.0]), np.array([0.5]), np.array([99.0])]
    total, survivors = secure_sum(vectors, CFG, Transcript("all"), dropped={3})
    assert survivors == (0, 1, 2)
    assert total.tolist() == [3.5]


@pytest.mark.parametrize("dropped", [0, 1, 2, 3])
def test_the_sum_is_exact_with_up_to_n_minus_t_dropouts(dropped):
    vectors = inputs(7)  # t = 4 by default: up to three may vanish
    gone = set(range(7 - dropped, 7))
    total, survivors = secure_sum(vectors, CFG, Transcript("all"), dropped=gone)
    assert set(survivors) == set(range(7)) - gone
    np.testing.assert_array_equal(total, np.sum([grid(vectors[k]) for k in survivors], 0))


def test_beyond_the_threshold_the_round_aborts_with_a_clear_error():
    with pytest.raises(AggregationAborted, match="3 of 7 clients survived.*t=4"):
        secure_sum(inputs(7), CFG, Transcript("all"), dropped={0, 1, 2, 3})
    with pytest.raises(ConfigError, match="masked-aggregation.threshold: expected at most"):
        secure_sum(inputs(3), MaskedAggConfig(threshold=5), Transcript("all"))


def test_a_raised_threshold_tolerates_fewer_dropouts():
    cfg = MaskedAggConfig(threshold=6)
    total, _ = secure_sum(inputs(7), cfg, Transcript("all"), dropped={2})
    np.testing.assert_array_equal(
        total, np.sum([grid(v) for k, v in enumerate(inputs(7)) if k != 2], 0)
    )
    with pytest.raises(AggregationAborted):
        secure_sum(inputs(7), cfg, Transcript("all"), dropped={2, 5})


def test_dropouts_pick_the_configured_fraction():
    rng = np.random.default_rng(0)
    assert len(dropouts(10, MaskedAggConfig(dropout=0.3), rng)) == 3
    assert dropouts(10, MaskedAggConfig(), rng) == frozenset()


def test_one_masked_vector_is_uniform_on_the_ring_whatever_it_carries():
    parties = [SecAggClient(i) for i in range(3)]
    keys = [p.advertise() for p in parties]
    for plain in (np.zeros(4000), np.full(4000, 7.0), np.arange(4000.0)):
        masked = parties[1].masked_input(encode(plain, CFG, 3), keys)
        assert kstest(masked.astype(np.float64) / 2.0**64, "uniform").pvalue > 1e-3


def test_keys_come_from_the_os_so_equal_runs_mask_differently():
    """Nothing seeds the masks: the server of one run cannot rebuild them from the run's seed."""
    a, b = Transcript("all"), Transcript("all")
    secure_sum(inputs(3), CFG, a)
    secure_sum(inputs(3), CFG, b)
    first = [m.payload for m in a.messages if m.kind == MASKED_STATISTICS]
    second = [m.payload for m in b.messages if m.kind == MASKED_STATISTICS]
    assert not any(np.array_equal(x, y) for x, y in zip(first, second, strict=True))


def test_any_t_shares_rebuild_a_secret_and_fewer_do_not():
    secret = bytes(range(32))
    shares = shamir_split(secret, 7, 4)
    assert shamir_join({x + 1: shares[x] for x in (6, 2, 4, 0)}, 4) == secret
    try:  # three points fit a different polynomial: almost surely not even 32 bytes
        fewer = shamir_join({x + 1: shares[x] for x in (6, 2, 4)}, 3)
    except OverflowError:
        fewer = None
    assert fewer != secret


def test_the_server_relays_shares_it_cannot_open():
    parties = [SecAggClient(i) for i in range(3)]
    keys = [p.advertise() for p in parties]
    sealed = parties[0].share_keys(keys, 2)
    with pytest.raises(InvalidTag):  # opened as if sent to client 2, or by the wrong party
        parties[1].receive_shares({0: sealed[2]}, keys)


def test_a_survivor_never_reveals_both_shares_of_one_client():
    parties = [SecAggClient(i) for i in range(4)]
    keys = [p.advertise() for p in parties]
    sealed = {u: p.share_keys(keys, 3) for u, p in enumerate(parties)}
    parties[1].receive_shares({u: sealed[u][1] for u in (0, 2, 3)}, keys)
    revealed = parties[1].unmask([0, 1, 2])
    assert set(revealed["seed"]) == {"0", "1", "2"} and set(revealed["key"]) == {"3"}


def test_the_transcript_carries_every_byte_and_the_server_redoes_the_sum():
    n, size = 5, 100
    transcript = Transcript("all")
    total, _ = secure_sum(inputs(n, size), CFG, transcript, dropped={4})
    up = {k: 0 for k in range(n)}
    for m in transcript.messages:
        if m.receiver == SERVER:
            up[int(m.sender.removeprefix("client:"))] += m.nbytes
    sealed_share = 12 + 2 * 66 + 16  # nonce, two field elements, GCM tag
    key_phase = 64 + (n - 1) * sealed_share
    assert up[4] == key_phase  # dropped after sharing its keys
    assert up[0] == key_phase + 8 * size + n * 66  # masked input, one share per client
    assert {m.kind for m in transcript.messages} >= {KEY_SHARES, UNMASK_SHARES}
    received = transcript.received_by(SERVER)
    np.testing.assert_array_equal(server_sum(received, CFG, MASKED_STATISTICS), total)
    assert not any(m.receiver == client(4) and m.round == 0 for m in transcript.messages)


def test_a_sum_that_could_wrap_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="fraction_bits"):
        encode(np.array([2.0**40]), CFG, 10)


# A server that lies (Bonawitz et al.'s active adversary): it runs rounds 0-2 honestly, then
# asks for unmasking shares with survivor lists of its choosing.


def honest_rounds(n, t, vectors):
    """Keys, sealed shares and every client's masked input, as the server holds them."""
    parties = [SecAggClient(k) for k in range(n)]
    keys = [p.advertise() for p in parties]
    sealed = {u: p.share_keys(keys, t) for u, p in enumerate(parties)}
    for v, p in enumerate(parties):
        p.receive_shares({u: sealed[u][v] for u in range(n) if u != v}, keys)
    masked = {k: p.masked_input(encode(vectors[k], CFG, n), keys) for k, p in enumerate(parties)}
    return parties, keys, masked


def unmask_one(victim, keys, masked, seed_answers, key_answers, t):
    """The victim's input from its seed b (answers listing it alive) and its s key (answers
    listing it dropped): what a server must never get both of."""
    b = shamir_join({w + 1: a["seed"][str(victim)] for w, a in seed_answers.items()}, t)
    s = shamir_join({w + 1: a["key"][str(victim)] for w, a in key_answers.items()}, t)
    s_key = X25519PrivateKey.from_private_bytes(s)
    out = masked[victim] - prg(b, masked[victim].size)
    for v, key in enumerate(keys):
        if v != victim:
            mask = prg(agree(s_key, key[KEY_BYTES:], b"mask"), out.size)
            out = out - mask if v > victim else out + mask
    return decode(out, CFG)


def answers(parties, asked, survivors):
    """Each asked client's answer to one unmasking request, or nothing where it refuses."""
    out = {}
    for w in asked:
        with contextlib.suppress(AggregationAborted):
            out[w] = parties[w].unmask(survivors)
    return out


def test_a_server_claiming_an_uploaded_client_dropped_cannot_also_get_its_seed():
    """The issue's attack: client 0 uploaded; the server tells 1, 2, 3 that 0 dropped (its s
    shares), then asks the same clients again listing 0 alive (its b shares). Today's clients
    answered both and 0's input came back exactly; now the second request is refused and the
    two clients that never answered are fewer than t."""
    n, t, victim = 5, 3, 0
    vectors = inputs(n, size=50)
    parties, keys, masked = honest_rounds(n, t, vectors)
    key_answers = answers(parties, [1, 2, 3], [1, 2, 3, 4])
    seed_answers = answers(parties, range(n), list(range(n)))
    assert set(key_answers) == {1, 2, 3}
    try:
        got = unmask_one(victim, keys, masked, seed_answers, key_answers, t)
    except OverflowError:  # fewer than t points: not even a 32-byte secret
        got = None
    assert got is None or not np.allclose(got, vectors[victim], atol=1e-3), "input recovered"
    assert set(seed_answers) == {0, 4}  # 1, 2, 3 refuse a second request: fewer than t


def test_a_threshold_of_half_the_clients_or_less_is_refused_naming_the_field():
    """With t <= n/2 two disjoint halves answer one request each: one half's shares rebuild
    s, the other's b. Clients require t > n/2, so every pair of t-sets overlaps."""
    with pytest.raises(ConfigError, match="defenses.masked-aggregation.threshold: expected more"):
        MaskedAggConfig(threshold=2).threshold_for(4)
    keys = [SecAggClient(k).advertise() for k in range(4)]
    with pytest.raises(ConfigError, match="threshold"):
        SecAggClient(0).share_keys(keys, 2)
    assert MaskedAggConfig(threshold=3).threshold_for(4) == 3


@pytest.mark.parametrize(
    "survivors, why",
    [
        ([1, 2], "fewer than the threshold"),
        ([1, 1, 1, 2], "fewer than the threshold"),
        ([0, 2, 3, 4], "does not list client 1"),
        ([1, 2, 9], "not a client"),
    ],
)
def test_a_client_aborts_on_a_survivor_list_too_short_or_without_it(survivors, why):
    parties, _, _ = honest_rounds(5, 3, inputs(5, size=10))
    with pytest.raises(AggregationAborted, match=why):
        parties[1].unmask(survivors)


def test_a_client_answers_one_unmasking_request_only():
    parties, _, _ = honest_rounds(5, 3, inputs(5, size=10))
    parties[1].unmask([0, 1, 2, 3, 4])
    with pytest.raises(AggregationAborted, match="already answered"):
        parties[1].unmask([1, 2, 3])
