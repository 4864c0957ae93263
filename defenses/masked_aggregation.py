"""Secure aggregation by pairwise masks (Bonawitz et al. 2017, without its dropout recovery,
which O-pFGL's one-shot protocol does not discuss).

Every pair of clients agrees on a key by Diffie-Hellman in RFC 3526's 2048-bit MODP group
(each client publishes g^a mod p through the server, a set-up message), expands it with
SHA-256-seeded PCG64 into a mask over Z_{2^64}, and client i adds the masks it shares with
higher-numbered clients and subtracts those it shares with lower-numbered ones. Contributions
are fixed-point numbers (``fraction_bits`` after the binary point, two's complement): the
masks cancel in the sum, which the server decodes exactly, while any one masked vector is
uniform on the ring, independent of what it carries.

The DH secrets are drawn from the run's seed so that a run replays exactly; a deployment
draws them from the operating system."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from defenses.base import DEFENSES, PrivacyUnit
from workbench.errors import ConfigError

# RFC 3526, group 14: the 2048-bit MODP prime, generator 2
MODP_2048 = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A0879"
    "8E3404DDEF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B"
    "0BFF5CB6F406B7EDEE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF0598DA4836"
    "1C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB9ED529077096966D670C354E4ABC9804"
    "F1746C08CA18217C32905E462E36CE3BE39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF6"
    "955817183995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)
GENERATOR = 2


class MaskedAggConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    fraction_bits: int = Field(24, ge=8, le=40, description="fixed-point bits after the point")


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


def mask_stream(key: int, size: int) -> np.ndarray:
    """The pseudo-random mask two clients derive from their shared key."""
    digest = hashlib.sha256(key.to_bytes(256, "big")).digest()
    rng = np.random.Generator(np.random.PCG64(int.from_bytes(digest, "big")))
    return rng.integers(0, 2**64, size, dtype=np.uint64, endpoint=False)


class MaskingClient:
    """One client's side: its DH secret, its public value, and its masked contribution."""

    def __init__(self, index: int, rng: np.random.Generator) -> None:
        self.index = index
        self._secret = int.from_bytes(rng.bytes(32), "big") | 1
        self.public = pow(GENERATOR, self._secret, MODP_2048)

    def masked(self, ring: np.ndarray, publics: Sequence[int]) -> np.ndarray:
        """``ring`` plus the masks shared with higher-numbered clients, minus those shared
        with lower-numbered ones (uint64 arithmetic wraps: the ring Z_{2^64})."""
        out = ring.copy()
        for j, public in enumerate(publics):
            if j == self.index:
                continue
            mask = mask_stream(pow(public, self._secret, MODP_2048), ring.size)
            out = out + mask if j > self.index else out - mask
        return out


def ring_sum(contributions: Sequence[np.ndarray]) -> np.ndarray:
    """What the server computes: the sum of the masked vectors in Z_{2^64}."""
    total = np.zeros_like(contributions[0])
    for c in contributions:
        total = total + c
    return total


class MaskedAggregation:
    name = "masked-aggregation"
    stage = "aggregation"
    Config = MaskedAggConfig

    def privacy_unit(self, config: MaskedAggConfig) -> PrivacyUnit | None:
        return None  # hides single uploads; adds no noise


DEFENSES.register("masked-aggregation")(MaskedAggregation())
