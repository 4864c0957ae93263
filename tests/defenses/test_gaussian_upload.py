import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fgl_workbench.accountants import Gaussian, PrivacyLedger, epsilon
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.dp_fedavg import update_vector
from fgl_workbench.defenses.gaussian_upload import GaussianUploadConfig, privatize
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import SERVER


def test_clipping_is_real_and_sensitivity_follows_the_relation():
    gen = torch.Generator().manual_seed(0)
    cfg = GaussianUploadConfig(clip=0.5, noise_multiplier=1e-9)
    for scale in (0.01, 1.0, 100.0):
        x = scale * torch.randn(7, 3, generator=gen)
        out = privatize(x, cfg, gen)
        assert out.shape == x.shape
        assert float(out.norm()) <= 0.5 + 1e-6
    assert cfg.sensitivity == 1.0
    with pytest.raises(ValidationError, match="add-remove gives no guarantee with local noise"):
        GaussianUploadConfig(clip=0.5, neighbouring="add-remove")


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "metis", 3, 0))


def test_fedavg_uploads_are_noisy_and_accounted(federation):
    g = applied("gaussian-upload", {"clip": 0.5, "noise_multiplier": 2.0})
    cfg = {"rounds": 5, "local_epochs": 1, "keep_payloads": "all"}
    trained = TARGETS.get("fedavg").fit(federation, cfg, [g], seed=0)
    by_hand = PrivacyLedger((Gaussian(2.0 * 1.0, 1.0, 5),))
    assert epsilon(trained.ledger, 1e-5).epsilon == epsilon(by_hand, 1e-5).epsilon
    sent = {m.round: m.payload for m in trained.transcript.messages if m.sender == SERVER}
    for m in trained.transcript.received_by(SERVER):
        delta = update_vector(m.payload, sent[m.round])
        expected = 2.0 * 1.0 * np.sqrt(delta.numel())  # noise std σ·Δ per coordinate
        assert 0.8 * expected < float(delta.norm()) < 1.2 * expected
