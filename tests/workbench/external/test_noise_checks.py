"""The tests FlowerRecorder runs on a user's uploads before it trusts their LocalDpMod: each
holds on the stated noise and catches a way real DP code breaks."""

import torch

from fgl_workbench.external.noise_checks import (
    misshapen_noise,
    noise_problems,
    shared_noise,
    shifted_noise,
    short_noise,
    unverifiable,
)


def test_the_noise_tests_hold_on_the_stated_noise_and_see_a_tenth_short():
    generator = torch.Generator().manual_seed(0)
    d, std, clip = 100_000, 0.5, 1.0

    def upload(scale, noise=None):
        u = torch.randn(d, generator=generator, dtype=torch.float64)
        z = torch.randn(d, generator=generator, dtype=torch.float64) if noise is None else noise
        return clip * u / u.norm() + scale * std * z

    assert not short_noise([upload(1.0) for _ in range(5)], std, clip)
    assert short_noise([upload(0.9) for _ in range(5)], std, clip)
    assert not shared_noise([upload(1.0) for _ in range(5)], std, clip)
    same = torch.randn(d, generator=generator, dtype=torch.float64)
    assert shared_noise([upload(1.0, same), upload(1.0), upload(1.0, same)], std, clip)
    assert shared_noise([upload(1.0, same), upload(1.0), upload(1.0, -same)], std, clip)


def test_the_shape_test_holds_on_the_stated_noise_and_sees_noise_on_a_tenth_of_the_entries():
    """Noise of the stated length on a tenth of the entries passes the χ² length test on
    2,000 entries; the entries' distribution gives it away. The stated noise passes both,
    over 30 trials of 9 uploads."""
    generator = torch.Generator().manual_seed(0)
    d, std, clip = 2000, 0.97, 1.0

    def upload(noise):
        u = torch.randn(d, generator=generator, dtype=torch.float64)
        return clip * u / u.norm() + noise

    def gaussian(n):
        return std * torch.randn(n, generator=generator, dtype=torch.float64)

    for _ in range(30):
        stated = [upload(gaussian(d)) for _ in range(9)]
        assert not misshapen_noise(stated, std, clip) and not short_noise(stated, std, clip)
    few = [
        upload(torch.cat([10**0.5 * gaussian(d // 10), torch.zeros(d - d // 10)])) for _ in range(9)
    ]
    assert not short_noise(few, std, clip)
    assert misshapen_noise(few, std, clip)


def _clipped(generator, d, clip):
    u = torch.randn(d, generator=generator, dtype=torch.float64)
    return clip * u / u.norm()


def test_pooled_length_sees_every_upload_a_little_short_on_a_small_model():
    """Half the noise on a 200-entry model: no one upload is short enough alone (the
    per-upload test passes it), their sum of squares is (the pooled test)."""
    generator = torch.Generator().manual_seed(1)
    d, std, clip = 200, 0.97, 1.0

    def uploads(scale, k=30):
        noise = [
            scale * std * torch.randn(d, generator=generator, dtype=torch.float64) for _ in range(k)
        ]
        return [_clipped(generator, d, clip) + z for z in noise]

    for _ in range(20):
        assert not short_noise(uploads(1.0), std, clip)
    assert short_noise(uploads(0.5), std, clip)


def test_a_model_too_small_to_show_the_noise_is_unverifiable():
    """One upload of 20 numbers at σ ≈ C: no noise at all would pass, so nothing is
    trusted; nine of them can show it."""
    assert unverifiable(1, 20, 0.97, 1.0)
    assert not unverifiable(9, 20, 0.97, 1.0)
    assert not unverifiable(1, 2000, 0.97, 1.0)


def test_noise_missing_on_one_array_and_noise_reused_across_rounds_are_seen():
    """A mod that leaves the biases bare (its weights noised as stated) and a client whose
    generator is seeded by its id (the same noise every round, the server subtracts two of
    its uploads): both pass the whole-vector length test and are caught; the stated noise
    gives no problem."""
    generator = torch.Generator().manual_seed(2)
    std, clip = 0.97, 1.0

    def upload(noise_w=None, noise_b=None):
        u = _clipped(generator, 2064, clip)
        w = std * torch.randn(2000, generator=generator, dtype=torch.float64)
        b = std * torch.randn(64, generator=generator, dtype=torch.float64)
        w = w if noise_w is None else noise_w
        b = b if noise_b is None else noise_b
        return {"weight": u[:2000] + w, "bias": u[2000:] + b}

    assert noise_problems([upload() for _ in range(9)], std, clip) == []
    bare = noise_problems([upload(noise_b=torch.zeros(64)) for _ in range(9)], std, clip)
    assert bare == ["an array of the uploads carries less noise than LocalDpMod's"]
    reused = std * torch.randn(2000, generator=generator, dtype=torch.float64)
    rounds = [upload(), upload(noise_w=reused), upload(), upload(noise_w=reused)]
    assert "two uploads share their noise: the server cancels it" in noise_problems(
        rounds, std, clip
    )


def test_a_stream_shifted_between_uploads_is_seen_and_independent_noise_is_not():
    """One noise stream read 7 entries apart by two uploads (or negated, 30 apart): the lag
    search finds it; 20 rounds of 9 independent uploads raise nothing."""
    generator = torch.Generator().manual_seed(3)
    d, std, clip = 2064, 0.97, 1.0

    def upload(noise):
        return _clipped(generator, d, clip) + noise

    def gaussian(n):
        return std * torch.randn(n, generator=generator, dtype=torch.float64)

    for _ in range(20):
        assert not shifted_noise([upload(gaussian(d)) for _ in range(9)], std, clip)
    stream = gaussian(d + 50)
    assert shifted_noise(
        [upload(stream[:d]), upload(gaussian(d)), upload(stream[7 : d + 7])], std, clip
    )
    assert shifted_noise([upload(stream[:d]), upload(-stream[30 : d + 30])], std, clip)


def test_uploads_changed_after_the_noise_are_not_checked_as_noise():
    """Top-10 % sparsification after LocalDpMod (post-processing: still DP) read as shared
    noise before; exact zeros now say what happened."""
    generator = torch.Generator().manual_seed(4)
    std, clip = 0.97, 1.0
    uploads = []
    for _ in range(3):
        x = _clipped(generator, 500, clip) + std * torch.randn(
            500, generator=generator, dtype=torch.float64
        )
        x[x.abs() < x.abs().quantile(0.9)] = 0.0
        uploads.append({"w": x})
    (problem,) = noise_problems(uploads, std, clip)
    assert "exact zeros" in problem
