"""Deliberately broken mechanisms, broken the way real DP code gets them wrong (too little
noise, noise reused, noise skipped, sampling accounted but not done, clipping lost or too
loose), patched
into the defenses' own code for as long as a ``with`` block lasts. The claims stay the stated
ones, so the canary audit must report a bound above them: the tests, the table in
docs/accounting.md and ``python -m fgl_workbench.audits.demonstration`` play each against
every defense it applies to (``APPLIES``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any
from unittest import mock

import numpy as np
import torch
from opacus.optimizers import optimizer as opacus_optimizer

from fgl_workbench.defenses import (
    aggregation_perturbation,
    dp_fedavg,
    dp_sgd,
    gaussian_upload,
    metric_dp,
    noise,
)

OFF = 1e6  # a clip no canary reaches


def _patched(*patches: tuple[Any, str, Any]) -> AbstractContextManager[None]:
    """Every (module, name, replacement) in place at once."""

    @contextmanager
    def applied() -> Iterator[None]:
        with ExitStack() as stack:
            for module, name, value in patches:
                stack.enter_context(mock.patch.object(module, name, value))
            yield

    return applied()


def _noise(make: Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]):
    """The defenses' noise and Opacus's DP-SGD noise, each replaced by ``make(real)``; a
    draw is keyed by what it is drawn for (shape and dtype), as a buggy cache would key it."""
    real, real_opacus = noise.gaussian, opacus_optimizer._generate_noise
    ours = make(lambda key, *a, **k: real(*a, **k))

    def draw(shape, std, generator, dtype=torch.float64):
        return ours((tuple(shape), dtype), shape, std, generator, dtype)

    theirs = make(lambda key, *a, **k: real_opacus(*a, **k))

    def opacus_draw(std, reference, generator=None, secure_mode=False):
        key = (tuple(reference.shape), reference.dtype)
        return theirs(
            key, std=std, reference=reference, generator=generator, secure_mode=secure_mode
        )

    return _patched((noise, "gaussian", draw), (opacus_optimizer, "_generate_noise", opacus_draw))


def scaled_noise(factor: float) -> AbstractContextManager[None]:
    """Noise ``factor`` times the std the mechanism states (a wrong normaliser, a σ applied
    to the wrong quantity)."""

    def make(real):
        def draw(key, *args, **kwargs):
            return real(key, *args, **kwargs) * factor

        return draw

    return _noise(make)


def reused_noise() -> AbstractContextManager[None]:
    """The first noise vector of each shape returned again on every later draw (a noise
    tensor created once outside the loop)."""

    def make(real):
        kept: dict[Any, torch.Tensor] = {}

        def draw(key, *args, **kwargs):
            if key not in kept:
                kept[key] = real(key, *args, **kwargs)
            return kept[key].clone()

        return draw

    return _noise(make)


def alternating_noise() -> AbstractContextManager[None]:
    """The first noise vector of each shape returned again with its sign flipped on every
    other draw (a cached tensor negated in place): sums of consecutive releases are exact."""

    def make(real):
        kept: dict[Any, torch.Tensor] = {}
        calls: dict[Any, int] = {}

        def draw(key, *args, **kwargs):
            if key not in kept:
                kept[key] = real(key, *args, **kwargs)
            calls[key] = calls.get(key, 0) + 1
            return kept[key].clone() * (1 if calls[key] % 2 else -1)

        return draw

    return _noise(make)


def half_noise() -> AbstractContextManager[None]:
    """Every other draw of each shape is zero: noise on half of the rounds (a flag that
    turns the noise off on alternate calls)."""

    def make(real):
        calls: dict[Any, int] = {}

        def draw(key, *args, **kwargs):
            calls[key] = calls.get(key, 0) + 1
            sample = real(key, *args, **kwargs)
            return sample if calls[key] % 2 else torch.zeros_like(sample)

        return draw

    return _noise(make)


def no_sampling() -> AbstractContextManager[None]:
    """Everyone takes part in every round and step while the ledger still claims Poisson
    sampling's amplification."""
    return _patched(
        (dp_fedavg, "poisson_clients", lambda rng, n, q: np.arange(n)),
        (dp_sgd, "poisson_sample", lambda n, q, generator: torch.ones(n, dtype=torch.bool)),
    )


def faster_sampling(factor: float) -> AbstractContextManager[None]:
    """Clients and records sampled at ``factor`` times the rate the ledger accounts (a batch
    size read as the dataset's, a rate set in two places)."""
    real_clients, real_records = dp_fedavg.poisson_clients, dp_sgd.poisson_sample
    return _patched(
        (
            dp_fedavg,
            "poisson_clients",
            lambda rng, n, q: real_clients(rng, n, min(1.0, factor * q)),
        ),
        (dp_sgd, "poisson_sample", lambda n, q, g: real_records(n, min(1.0, factor * q), g)),
    )


def no_clipping() -> AbstractContextManager[None]:
    """No L2 bound on updates or gradients, no out-degree bound, no normalisation of rows
    (the noise std stays the stated σ·clip)."""
    real_optimizer = dp_sgd.private_optimizer

    def unclipped(optimizer, cfg, num_records, generator):
        off = cfg.model_copy(
            update={"clip": OFF * cfg.clip, "noise_multiplier": cfg.noise_multiplier / OFF}
        )
        return real_optimizer(optimizer, off, num_records, generator)

    def identity(x, *args, **kwargs):
        return x

    return _patched(
        (dp_fedavg, "clip_to_norm", identity),
        (gaussian_upload, "clip_to_norm", identity),
        (dp_sgd, "private_optimizer", unclipped),
        (aggregation_perturbation, "bound_out_degree", identity),
        (metric_dp, "normalise", identity),
    )


def loose_clipping(factor: float) -> AbstractContextManager[None]:
    """Every bound ``factor`` times looser than stated: the L2 clip of updates and gradients,
    the out-degree bound, the norm rows are normalised to (the noise stays σ times the
    stated clip: a clip read from the wrong field)."""
    real_clip, real_upload_clip = dp_fedavg.clip_to_norm, gaussian_upload.clip_to_norm
    real_optimizer, real_degree = (
        dp_sgd.private_optimizer,
        aggregation_perturbation.bound_out_degree,
    )
    real_normalise = metric_dp.normalise

    def loose_optimizer(optimizer, cfg, num_records, generator):
        loose = cfg.model_copy(
            update={"clip": factor * cfg.clip, "noise_multiplier": cfg.noise_multiplier / factor}
        )
        return real_optimizer(optimizer, loose, num_records, generator)

    return _patched(
        (dp_fedavg, "clip_to_norm", lambda v, clip: real_clip(v, factor * clip)),
        (gaussian_upload, "clip_to_norm", lambda v, clip: real_upload_clip(v, factor * clip)),
        (dp_sgd, "private_optimizer", loose_optimizer),
        (
            aggregation_perturbation,
            "bound_out_degree",
            lambda e, d, g: real_degree(e, int(factor * d), g),
        ),
        (metric_dp, "normalise", lambda x: factor * real_normalise(x)),
    )


BREAKS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "noise σ/3": lambda: scaled_noise(1 / 3),
    "same noise every round": reused_noise,
    "noise flipping sign every round": alternating_noise,
    "noise on half of the rounds": half_noise,
    "amplification without sampling": no_sampling,
    "clipping off": no_clipping,
    "clipping ×4": lambda: loose_clipping(4.0),
}
