"""Secure aggregation by pairwise masks with dropout recovery, as deployed systems run it:
SecAgg (Bonawitz et al. 2017). The server only relays and adds up; clients do not trust it
(t > n/2, survivor lists checked, one unmasking answer each), so a server that lies about
who survived still learns only the survivors' sum.

One aggregation takes four rounds, each message recorded in the transcript with its real bytes:

0. **Advertise keys.** Each client draws two X25519 key pairs from the operating system (``c``
   to encrypt the shares it sends other clients, ``s`` to agree masks) and a 32-byte self-mask
   seed ``b``; it uploads both public keys and the server broadcasts the list.
1. **Share keys.** Each client splits ``s``'s secret key and ``b`` into Shamir shares (any
   ``t`` of the ``n`` rebuild them; over the prime field 2^521 − 1) and sends share ``j`` to
   client ``j`` through the server, sealed with AES-GCM under a key agreed with ``c``: the
   server relays shares it cannot read.
2. **Masked input.** Client ``u`` uploads ``x_u + PRG(b_u) + Σ_{v>u} PRG(s_uv) −
   Σ_{v<u} PRG(s_uv)`` over Z_{2^64}, where ``s_uv`` is HKDF of the X25519 agreement of ``u``'s
   and ``v``'s ``s`` keys and the PRG is ChaCha20. A client that drops out after round 1 never
   sends it.
3. **Unmasking.** The server names the survivors; each survivor reveals its shares of ``b_v``
   for every surviving ``v`` and of ``s``'s secret key for every dropped ``u`` (never both for
   one client, which would unmask that client's input). From ``t`` shares the server rebuilds
   them, removes the survivors' self-masks and the dropped clients' pairwise masks, and
   decodes the survivors' exact sum. Fewer than ``t`` survivors abort with a clear error.
   Each client answers one request only, and aborts on a list of fewer than ``t`` clients
   or one without itself; with ``t > n/2`` any two answering ``t``-sets overlap, so no
   client's seed and key are both rebuilt (the consistency-check round with signatures, which
   also stops a server that forges survivors' identities, is not modelled: clients here
   cannot be impersonated).

Contributions are fixed-point numbers (``fraction_bits`` after the binary point, two's
complement), so the sum is exact, while any one masked vector is uniform on the ring whatever
it carries. Keys, seeds and Shamir coefficients come from the operating system, never from the
run's seed: the decoded sum does not depend on them, so runs still replay exactly."""

from __future__ import annotations

import os
import secrets
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import BaseModel, ConfigDict, Field

from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.errors import ConfigError
from fgl_workbench.transcript import (
    MASKED_STATISTICS,
    PUBLIC_KEY,
    SERVER,
    Message,
    Transcript,
    client,
)

FIELD = 2**521 - 1  # a Mersenne prime above every 32-byte secret
SHARE_BYTES = 66  # one field element
KEY_BYTES = 32
KEY_SHARES = "key_shares"  # sealed Shamir shares relayed by the server
SURVIVORS = "survivors"  # the server's list of clients whose masked input arrived
UNMASK_SHARES = "unmask_shares"  # the shares a survivor reveals for unmasking


class MaskedAggConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    fraction_bits: int = Field(24, ge=8, le=40, description="fixed-point bits after the point")
    threshold: int | None = Field(
        None,
        ge=2,
        description="Shamir threshold t: the fewest clients that must survive to unmask; "
        "more than half the n clients (so a lying server cannot collect both shares of one "
        "client from two disjoint groups); default n // 2 + 1",
    )
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="fraction of clients that vanish after sharing their keys, before their "
        "masked input arrives (the sum is then over the survivors)",
    )

    def threshold_for(self, parties: int) -> int:
        t = self.threshold if self.threshold is not None else parties // 2 + 1
        check_threshold(t, parties)
        return t

    def check_clients(self, clients: int) -> None:
        """A suite's check, before any cell runs: one party per client."""
        self.threshold_for(clients)


def check_threshold(t: int, parties: int) -> None:
    """``n/2 < t <= n``: any two sets of ``t`` answering clients share one, who answers a
    single unmasking request, so a server cannot rebuild both secrets of one client."""
    if t > parties:
        raise ConfigError(
            f"defenses.masked-aggregation.threshold: expected at most the {parties} "
            f"clients, got {t}"
        )
    if 2 * t <= parties:
        raise ConfigError(
            f"defenses.masked-aggregation.threshold: expected more than half the {parties} "
            f"clients (at least {parties // 2 + 1}), got {t}"
        )


class AggregationAborted(ConfigError):
    """Too few clients survived to rebuild the masks: the round yields nothing."""


def encode(vector: np.ndarray, cfg: MaskedAggConfig, parties: int) -> np.ndarray:
    """Fixed-point ring elements (uint64); a clear error when the sum of ``parties`` such
    vectors could wrap around the ring."""
    scaled = np.round(np.asarray(vector, dtype=np.float64) * 2.0**cfg.fraction_bits)
    if scaled.size and np.abs(scaled).max() * max(parties, 1) >= 2.0**62:
        raise ConfigError(
            f"defenses.masked-aggregation.fraction_bits: values up to {np.abs(vector).max():.3g} "
            f"from {parties} parties overflow a 64-bit ring at {cfg.fraction_bits} bits; lower it"
        )
    return scaled.astype(np.int64).view(np.uint64)


def decode(ring: np.ndarray, cfg: MaskedAggConfig) -> np.ndarray:
    return ring.view(np.int64).astype(np.float64) / 2.0**cfg.fraction_bits


def ring_sum(contributions: Collection[np.ndarray]) -> np.ndarray:
    """What the server adds up: the masked vectors in Z_{2^64} (uint64 arithmetic wraps)."""
    return np.sum(np.stack(list(contributions)), axis=0, dtype=np.uint64)


def prg(key: bytes, size: int) -> np.ndarray:
    """``size`` uniform ring elements: ChaCha20's keystream under ``key`` (a zero nonce is
    safe because every key expands into one vector only)."""
    stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    return np.frombuffer(stream.update(bytes(8 * size)), dtype=np.uint64)


def agree(private: X25519PrivateKey, public: bytes, purpose: bytes) -> bytes:
    """A 32-byte key two parties share: HKDF-SHA256 of their X25519 agreement."""
    secret = private.exchange(X25519PublicKey.from_public_bytes(public))
    kdf = HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=b"fgl-workbench secagg " + purpose)
    return kdf.derive(secret)


def shamir_split(secret: bytes, parties: int, threshold: int) -> list[bytes]:
    """Shares at x = 1..parties of a random polynomial of degree threshold − 1 whose constant
    term is ``secret``; any ``threshold`` of them rebuild it, fewer reveal nothing."""
    coefficients = [int.from_bytes(secret, "big")]
    coefficients += [secrets.randbelow(FIELD) for _ in range(threshold - 1)]
    shares = []
    for x in range(1, parties + 1):
        y = 0
        for c in reversed(coefficients):
            y = (y * x + c) % FIELD
        shares.append(y.to_bytes(SHARE_BYTES, "big"))
    return shares


def shamir_join(shares: Mapping[int, bytes], threshold: int) -> bytes:
    """The secret from ``threshold`` shares ``{x: share}``: Lagrange interpolation at 0."""
    points = sorted((x, int.from_bytes(y, "big")) for x, y in shares.items())[:threshold]
    secret = 0
    for xi, yi in points:
        num, den = 1, 1
        for xj, _ in points:
            if xj != xi:
                num = num * -xj % FIELD
                den = den * (xi - xj) % FIELD
        secret = (secret + yi * num * pow(den, -1, FIELD)) % FIELD
    return secret.to_bytes(KEY_BYTES, "big")


def public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes_raw()


class SecAggClient:
    """One client's side: its keys and seed (from the OS), the shares it holds for others,
    its masked input and what it reveals for unmasking. It trusts the server with nothing:
    it checks the survivor list and answers one unmasking request only (Bonawitz et al.'s
    clients against an active server)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._c = X25519PrivateKey.generate()
        self._s = X25519PrivateKey.generate()
        self._b = os.urandom(KEY_BYTES)
        self._held: dict[int, tuple[bytes, bytes]] = {}  # u -> (share of s_u, share of b_u)
        self._threshold = 0  # t, fixed when the shares are split
        self._answered = False  # an unmasking request was answered

    def advertise(self) -> bytes:
        """Round 0: the two public keys (c, then s), 64 bytes."""
        return public_bytes(self._c) + public_bytes(self._s)

    def share_keys(self, keys: Sequence[bytes], threshold: int) -> dict[int, bytes]:
        """Round 1: each other client's sealed shares of this client's s key and seed b."""
        n = len(keys)
        check_threshold(threshold, n)
        self._threshold = threshold
        s_shares = shamir_split(self._s.private_bytes_raw(), n, threshold)
        b_shares = shamir_split(self._b, n, threshold)
        self._held[self.index] = (s_shares[self.index], b_shares[self.index])
        return {
            v: self._seal(keys[v], v, s_shares[v] + b_shares[v])
            for v in range(n)
            if v != self.index
        }

    def receive_shares(self, sealed: Mapping[int, bytes], keys: Sequence[bytes]) -> None:
        """Round 1, inbound: open the shares other clients sent (AES-GCM checks the pair)."""
        for u, blob in sealed.items():
            key = agree(self._c, keys[u][:KEY_BYTES], b"shares")
            plain = AESGCM(key).decrypt(blob[:12], blob[12:], pair(u, self.index))
            self._held[u] = (plain[:SHARE_BYTES], plain[SHARE_BYTES:])

    def masked_input(self, ring: np.ndarray, keys: Sequence[bytes]) -> np.ndarray:
        """Round 2: the input plus the self-mask, plus the masks shared with higher-numbered
        clients, minus those shared with lower-numbered ones."""
        out = ring + prg(self._b, ring.size)
        for v, key in enumerate(keys):
            if v != self.index:
                mask = prg(agree(self._s, key[KEY_BYTES:], b"mask"), ring.size)
                out = out + mask if v > self.index else out - mask
        return out

    def unmask(self, survivors: Collection[int]) -> dict[str, dict[str, bytes]]:
        """Round 3: shares of the survivors' seeds and of the dropped clients' s keys. Once
        only, and only for a list of at least t clients naming this one: a server asking
        twice, or listing a client alive to some and dropped to others, would get both the
        seed b and the key s of one client, which unmask its input."""
        alive = self._check_survivors(survivors)
        self._answered = True
        return {
            "seed": {str(u): b for u, (_, b) in sorted(self._held.items()) if u in alive},
            "key": {str(u): s for u, (s, _) in sorted(self._held.items()) if u not in alive},
        }

    def _check_survivors(self, survivors: Collection[int]) -> set[int]:
        """The survivor list as a set, or an abort saying why this client will not answer."""
        alive = set(survivors)
        why = ""
        if self._answered:
            why = "it already answered an unmasking request"
        elif not alive <= set(self._held):
            why = f"the list names {sorted(alive - set(self._held))}, not a client of this round"
        elif self.index not in alive:
            why = f"the list does not list client {self.index}, which is alive"
        elif len(alive) < self._threshold:
            why = (
                f"{len(alive)} distinct survivors listed, fewer than the threshold "
                f"t={self._threshold}"
            )
        if why:
            raise AggregationAborted(
                f"defenses.masked-aggregation: client {self.index} aborted the unmasking: {why}"
            )
        return alive

    def _seal(self, their_keys: bytes, v: int, plain: bytes) -> bytes:
        nonce = os.urandom(12)
        key = agree(self._c, their_keys[:KEY_BYTES], b"shares")
        return nonce + AESGCM(key).encrypt(nonce, plain, pair(self.index, v))


def pair(u: int, v: int) -> bytes:
    """Associated data binding a sealed share to its sender and receiver."""
    return u.to_bytes(4, "big") + v.to_bytes(4, "big")


def unmasked_sum(
    masked: Mapping[int, np.ndarray],
    keys: Sequence[bytes],
    revealed: Mapping[int, Mapping[str, Mapping[str, bytes]]],
    threshold: int,
) -> np.ndarray:
    """The server's round 3: the survivors' ring sum with every mask removed."""
    survivors = sorted(masked)
    check_survivors(len(revealed), len(keys), threshold)
    total = ring_sum([masked[v] for v in survivors])
    size = total.size

    def rebuilt(kind: str, u: int) -> bytes:
        return shamir_join({w + 1: r[kind][str(u)] for w, r in revealed.items()}, threshold)

    for v in survivors:
        total = total - prg(rebuilt("seed", v), size)
    for u in sorted(set(range(len(keys))) - set(survivors)):
        dropped = X25519PrivateKey.from_private_bytes(rebuilt("key", u))
        for v in survivors:
            mask = prg(agree(dropped, keys[v][KEY_BYTES:], b"mask"), size)
            total = total - mask if u > v else total + mask
    return total


def check_survivors(survivors: int, parties: int, threshold: int) -> None:
    if survivors < threshold:
        raise AggregationAborted(
            f"defenses.masked-aggregation: aborted, {survivors} of {parties} clients survived, "
            f"fewer than the threshold t={threshold} needed to remove the dropped clients' "
            "masks (lower dropout or threshold)"
        )


def dropouts(parties: int, cfg: MaskedAggConfig, rng: np.random.Generator) -> frozenset[int]:
    """Which clients vanish after sharing their keys: ``round(dropout * parties)`` of them."""
    count = round(cfg.dropout * parties)
    return frozenset(int(k) for k in rng.choice(parties, size=count, replace=False))


def secure_sum(
    vectors: Sequence[np.ndarray],
    cfg: MaskedAggConfig,
    transcript: Transcript,
    dropped: Collection[int] = (),
    round: int = 0,
    kind: str = MASKED_STATISTICS,
) -> tuple[np.ndarray, tuple[int, ...]]:
    """Run the protocol among ``len(vectors)`` clients (key set-up at ``round − 1``, masked
    inputs and unmasking at ``round``), recording every message; returns the survivors' exact
    sum, as the server decodes it, and the survivors."""
    n = len(vectors)
    t = cfg.threshold_for(n)
    parties = [SecAggClient(k) for k in range(n)]
    everyone = [client(k) for k in range(n)]
    keys = [p.advertise() for p in parties]
    for k, key in enumerate(keys):
        transcript.send(round - 1, client(k), SERVER, PUBLIC_KEY, key)
    transcript.broadcast(round - 1, SERVER, everyone, PUBLIC_KEY, keys)
    sealed = {u: p.share_keys(keys, t) for u, p in enumerate(parties)}
    for u in range(n):
        outbox = {str(v): blob for v, blob in sealed[u].items()}
        transcript.send(round - 1, client(u), SERVER, KEY_SHARES, outbox)
    for v, p in enumerate(parties):
        inbox = {u: sealed[u][v] for u in range(n) if u != v}
        transcript.send(
            round - 1, SERVER, client(v), KEY_SHARES, {str(u): b for u, b in inbox.items()}
        )
        p.receive_shares(inbox, keys)
    survivors = tuple(k for k in range(n) if k not in set(dropped))
    masked = {k: parties[k].masked_input(encode(vectors[k], cfg, n), keys) for k in survivors}
    for k in survivors:
        transcript.send(round, client(k), SERVER, kind, masked[k])
    check_survivors(len(survivors), n, t)
    listed = np.asarray(survivors, dtype=np.int32)
    transcript.broadcast(round, SERVER, [client(k) for k in survivors], SURVIVORS, listed)
    revealed = {k: parties[k].unmask(survivors) for k in survivors}
    for k in survivors:
        transcript.send(round, client(k), SERVER, UNMASK_SHARES, revealed[k])
    return decode(unmasked_sum(masked, keys, revealed, t), cfg), survivors


def server_sum(received: Sequence[Message], cfg: MaskedAggConfig, kind: str) -> np.ndarray | None:
    """What the server decodes from the messages it received (None when they hold no
    masked inputs): an attack on the server's view redoes exactly the server's work."""

    def by_sender(k: str) -> dict[int, object]:
        return {
            int(m.sender.removeprefix("client:")): m.payload
            for m in received
            if m.kind == k and m.payload is not None and m.sender != SERVER
        }

    masked = by_sender(kind)
    if not masked:
        return None
    advertised = by_sender(PUBLIC_KEY)
    keys = [advertised[k] for k in sorted(advertised)]
    revealed = by_sender(UNMASK_SHARES)
    total = unmasked_sum(masked, keys, revealed, cfg.threshold_for(len(keys)))  # type: ignore[arg-type]
    return decode(total, cfg)


class MaskedAggregation:
    name = "masked-aggregation"
    stage = "aggregation"
    Config = MaskedAggConfig

    def privacy_unit(self, config: MaskedAggConfig) -> PrivacyUnit | None:
        return None  # hides single uploads; adds no noise


DEFENSES.register("masked-aggregation")(MaskedAggregation())
