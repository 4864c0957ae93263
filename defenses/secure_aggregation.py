"""Secure aggregation with CKKS homomorphic encryption (TenSEAL).

Roles, as in HE-based federated learning: the clients' **key holder** creates the CKKS context
and keeps the secret key; every client encrypts its flattened contribution under the public
context; the **server** receives only ciphertexts and the public context (no secret key), adds
the ciphertexts and, for central DP, encrypted-domain noise; the aggregate goes back to the
clients as a ciphertext and only they decrypt it.

CKKS is approximate and its encryption randomness comes from the OS, not from our seed. To keep
"same seed, same numbers", clients round their contribution to a fixed-point grid of step
2^-precision_bits before encrypting: the exact sum of grid values is again a grid value, and
decryption rounds back onto the grid. That recovers the exact sum whenever CKKS's error is below
half a step (checked on every decryption; a clear error otherwise). The only deviation from the
plaintext sum is the grid rounding, measured in docs/defenses.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tenseal as ts
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fgl_workbench.defenses.base import DEFENSES, PrivacyUnit
from fgl_workbench.errors import ConfigError


class SecureAggConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    poly_modulus_degree: int = Field(8192, description="CKKS ring degree; slots = half of it")
    coeff_mod_bit_sizes: list[int] = Field(
        [60, 40, 60], description="modulus chain; additions need no multiplicative depth"
    )
    scale_bits: int = Field(40, ge=20, le=60, description="CKKS scale 2^scale_bits")
    precision_bits: int = Field(
        20, ge=8, le=30, description="contributions are rounded to a grid of step 2^-bits"
    )

    @model_validator(mode="after")
    def _check(self) -> SecureAggConfig:
        if self.poly_modulus_degree not in (4096, 8192, 16384, 32768):
            raise ValueError("poly_modulus_degree: expected one of 4096, 8192, 16384, 32768")
        if len(self.coeff_mod_bit_sizes) < 2:
            raise ValueError("coeff_mod_bit_sizes: expected at least two primes")
        return self

    @property
    def slots(self) -> int:
        return self.poly_modulus_degree // 2


@dataclass(frozen=True)
class Ciphertext:
    """Serialised CKKS chunks of one flat vector: what travels on the wire."""

    chunks: tuple[bytes, ...]
    size: int

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks)


def on_grid(vector: np.ndarray, cfg: SecureAggConfig) -> np.ndarray:
    step = 2.0**-cfg.precision_bits
    return np.round(np.asarray(vector, dtype=np.float64) / step) * step


class KeyHolder:
    """The clients' side of the protocol: owns the secret key and decrypts aggregates."""

    def __init__(
        self, cfg: SecureAggConfig, rotations: bool = False, secret: bytes | None = None
    ) -> None:
        """``rotations``: also publish Galois keys, so the server can take encrypted inner
        products (CeFGC+'s similarities), not only sums. ``secret``: a stored key
        (``secret_context()``) instead of a fresh one."""
        self.cfg = cfg
        try:
            self._context = (
                ts.context_from(secret)
                if secret is not None
                else ts.context(
                    ts.SCHEME_TYPE.CKKS, cfg.poly_modulus_degree, -1, cfg.coeff_mod_bit_sizes
                )
            )
        except ValueError as exc:
            msg = f"defenses.secure-aggregation: invalid CKKS parameters ({exc})"
            raise ConfigError(msg) from exc
        self._context.global_scale = 2.0**cfg.scale_bits
        if rotations:
            self._context.generate_galois_keys()
        self.public_context = self._context.serialize(save_secret_key=False)

    def secret_context(self) -> bytes:
        """The context with its secret key (no Galois keys): enough to decrypt later, so a
        curious client's attacks can run on a stored run."""
        return self._context.serialize(
            save_public_key=True,
            save_secret_key=True,
            save_galois_keys=False,
            save_relin_keys=False,
        )

    def decrypt_scalar(self, ciphertext: bytes) -> float:
        """The first slot of a serialised CKKS vector (e.g. an encrypted inner product):
        approximate, no grid."""
        return float(ts.ckks_vector_from(self._context, ciphertext).decrypt()[0])

    def decrypt(self, ciphertext: Ciphertext) -> np.ndarray:
        """The exact sum of the grid-rounded contributions, as float64."""
        values = np.concatenate(
            [np.asarray(ts.ckks_vector_from(self._context, c).decrypt()) for c in ciphertext.chunks]
        )[: ciphertext.size]
        step = 2.0**-self.cfg.precision_bits
        steps = np.round(values / step)
        error = float(np.abs(values / step - steps).max(initial=0.0))
        if error > 0.25:
            raise ConfigError(
                "defenses.secure-aggregation: CKKS error reached "
                f"{error:.2f} grid steps (expected < 0.25); raise scale_bits or lower "
                "precision_bits"
            )
        return steps * step


class Encryptor:
    """What a client holds: the public context only, enough to encrypt."""

    def __init__(self, public_context: bytes, cfg: SecureAggConfig) -> None:
        self.cfg = cfg
        self._context = ts.context_from(public_context)

    def encrypt(self, vector: np.ndarray) -> Ciphertext:
        grid = on_grid(vector, self.cfg)
        n = self.cfg.slots
        chunks = tuple(
            ts.ckks_vector(self._context, grid[i : i + n].tolist()).serialize()
            for i in range(0, grid.size, n)
        )
        return Ciphertext(chunks, grid.size)


class AggregationServer:
    """The server's side: holds the public context, never a secret key."""

    def __init__(self, public_context: bytes, cfg: SecureAggConfig) -> None:
        self.cfg = cfg
        self._context = ts.context_from(public_context)
        self._encryptor = Encryptor(public_context, cfg)

    @property
    def has_secret_key(self) -> bool:
        return self._context.has_secret_key()

    def sum(
        self, ciphertexts: Sequence[Ciphertext], size: int, plain_addend: np.ndarray | None = None
    ) -> Ciphertext:
        """Σ ciphertexts (+ a plaintext vector, e.g. the server's DP noise), still encrypted.
        The addend is rounded onto the contributions' grid, which is post-processing of
        (sum + addend) since the sum lies on the grid already. With no contribution (a round
        Poisson sampling left empty) the server encrypts the addend, or zeros, itself."""
        if not ciphertexts:
            return self._encryptor.encrypt(np.zeros(size) if plain_addend is None else plain_addend)
        if any(c.size != size for c in ciphertexts):
            raise ValueError("secure aggregation: contributions differ in length")
        chunks, start = [], 0
        for parts in zip(*(c.chunks for c in ciphertexts), strict=True):
            total = ts.ckks_vector_from(self._context, parts[0])
            for p in parts[1:]:
                total += ts.ckks_vector_from(self._context, p)
            n = total.size()
            if plain_addend is not None:
                total += on_grid(plain_addend[start : start + n], self.cfg).tolist()
            chunks.append(total.serialize())
            start += n
        return Ciphertext(tuple(chunks), size)

    def inner_product(self, a: Ciphertext, b: Ciphertext) -> bytes:
        """⟨a, b⟩ under encryption (needs the key holder's Galois keys): one serialised
        CKKS vector whose first slot decrypts to the inner product."""
        total = None
        for x, y in zip(a.chunks, b.chunks, strict=True):
            part = ts.ckks_vector_from(self._context, x).dot(ts.ckks_vector_from(self._context, y))
            total = part if total is None else total + part
        assert total is not None
        return total.serialize()


@dataclass(frozen=True)
class Session:
    """One training run's protocol parties: the key holder (clients' side), the clients'
    encryptor, and the server, which receives only the public context."""

    keys: KeyHolder
    client: Encryptor
    server: AggregationServer

    @classmethod
    def start(cls, cfg: SecureAggConfig, rotations: bool = False) -> Session:
        keys = KeyHolder(cfg, rotations)
        public = keys.public_context
        return cls(keys, Encryptor(public, cfg), AggregationServer(public, cfg))


class SecureAggregation:
    name = "secure-aggregation"
    stage = "aggregation"
    Config = SecureAggConfig

    def privacy_unit(self, config: SecureAggConfig) -> PrivacyUnit | None:
        return None  # hides uploads; adds no noise


DEFENSES.register("secure-aggregation")(SecureAggregation())
