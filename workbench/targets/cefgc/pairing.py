"""CeFGC+'s privacy-enhancing aggregation (the paper's Eqs. 11-12) on CKKS ciphertexts: each
generator is averaged with the one most similar to it (cosine of the weight vectors) before
the server redistributes them, and the server never decrypts a generator.

The paper computes the similarities "under HE" but an argmax needs comparisons CKKS cannot
do, so someone must decrypt the similarities. Here the server computes the encrypted inner
products ⟨θ_i, θ_j⟩ (with the key holder's Galois keys) and sends them to the key holder (a
client, which holds the secret key as every client does), which returns the pairing: the key
holder learns the similarity matrix, the server learns who pairs with whom, and neither sees
a generator. This exchange comes on top of the paper's three rounds. The server sends
Enc(θ_i + θ_j*); receivers decrypt and halve (the mean, post-processed). Generators pair only
within a pool (CeFGC: models of the same class; CeFGC*: all)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fgl_workbench.defenses.secure_aggregation import AggregationServer, Ciphertext, KeyHolder

# what the + variants' extra exchange sends (on top of the generators themselves and the
# public context, key holder → server)
SIMILARITIES = "similarities"  # encrypted inner products, server → key holder
PAIRING = "pairing"  # each generator's partner, key holder → server


def encrypted_gram(server: AggregationServer, items: Sequence[Ciphertext]) -> dict:
    """{(i, j): Enc⟨θ_i, θ_j⟩} for i ≤ j: what the server computes and sends the key holder."""
    return {
        (i, j): server.inner_product(items[i], items[j])
        for i in range(len(items))
        for j in range(i, len(items))
    }


def partners(keys: KeyHolder, gram: dict, pools: Sequence[object]) -> list[int | None]:
    """The key holder's answer: each item's most similar other item of its pool (cosine;
    None when it is alone in its pool). Similarities are rounded to 1e-6 so that CKKS noise
    cannot reorder near-ties from run to run."""
    n = len(pools)
    g = np.zeros((n, n))
    for (i, j), ct in gram.items():
        g[i, j] = g[j, i] = keys.decrypt_scalar(ct)
    norms = np.sqrt(np.clip(np.diag(g), 1e-24, None))
    cos = np.round(g / np.outer(norms, norms), 6)
    out: list[int | None] = []
    for i in range(n):
        same = [j for j in range(n) if j != i and pools[j] == pools[i]]
        out.append(max(same, key=lambda j: (cos[i, j], -j)) if same else None)
    return out


def paired_sums(
    server: AggregationServer, items: Sequence[Ciphertext], pairing: Sequence[int | None]
) -> list[Ciphertext]:
    """Enc(θ_i + θ_j*) per item (Enc(2θ_i) for an unpaired one, so that halving is uniform)."""
    return [
        server.sum([items[i], items[i if j is None else j]], items[i].size)
        for i, j in enumerate(pairing)
    ]


def flatten(state: dict[str, torch.Tensor]) -> np.ndarray:
    return torch.cat([v.reshape(-1).double() for v in state.values()]).numpy(force=True)


def unflatten(vector: np.ndarray, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``vector`` cut into tensors shaped as ``like`` (the architecture is public)."""
    out, start = {}, 0
    for key, v in like.items():
        out[key] = torch.as_tensor(vector[start : start + v.numel()]).view_as(v).to(v.dtype)
        start += v.numel()
    return out


def opened(
    keys: KeyHolder, package: dict, like: dict[str, torch.Tensor], summands: int = 2
) -> dict:
    """What a receiving client makes of one encrypted package: each Enc(θ_i + θ_j*)
    decrypted and halved into a generator's weights (shaped as ``like``); ``summands=1``
    opens a single encrypted generator (a client's own upload)."""
    return {
        "classes": package["classes"],
        "models": {
            key: unflatten(keys.decrypt(ct) / summands, like)
            for key, ct in package["models"].items()
        },
    }
