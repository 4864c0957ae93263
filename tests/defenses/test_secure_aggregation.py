import numpy as np
import pytest
import tenseal as ts
import torch

from fgl_workbench.adversary.threat import server_view
from fgl_workbench.attacks.base import AttackInput
from fgl_workbench.attacks.membership.observe import observed_apis
from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.partition import make_partition
from fgl_workbench.defenses import applied
from fgl_workbench.defenses.secure_aggregation import Ciphertext, SecureAggConfig, Session, on_grid
from fgl_workbench.errors import ConfigError, NotApplicableError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import CIPHERTEXT, MODEL_WEIGHTS, SERVER


@pytest.fixture(scope="module")
def session():
    return Session.start(SecureAggConfig())


def test_server_holds_no_secret_key(session):
    assert not session.server.has_secret_key
    chunk = session.client.encrypt(np.ones(3)).chunks[0]
    with pytest.raises(ValueError, match="secret"):  # TenSEAL refuses to decrypt without it
        ts.ckks_vector_from(session.server._context, chunk).decrypt()


def test_decrypted_sum_is_the_exact_sum_of_grid_values(session):
    rng = np.random.default_rng(0)
    vectors = [rng.normal(scale=s, size=10_000) for s in (1e-3, 1e-2, 1.0, 30.0)]
    total = session.keys.decrypt(
        session.server.sum([session.client.encrypt(v) for v in vectors], 10_000)
    )
    cfg = session.keys.cfg
    np.testing.assert_array_equal(total, sum(on_grid(v, cfg) for v in vectors))
    plain = sum(vectors)
    assert np.linalg.norm(total - plain) / np.linalg.norm(plain) < 1e-4


def test_server_addend_and_empty_round(session):
    noise = np.linspace(-1, 1, 5000)
    out = session.keys.decrypt(session.server.sum([], 5000, noise))
    np.testing.assert_array_equal(out, on_grid(noise, session.keys.cfg))


def test_ciphertext_bytes_are_the_serialised_size(session):
    ct = session.client.encrypt(np.zeros(10_000))
    assert isinstance(ct, Ciphertext) and len(ct.chunks) == 3  # 4096 slots per chunk
    assert ct.nbytes == sum(len(c) for c in ct.chunks) > 10_000 * 8


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="poly_modulus_degree"):
        SecureAggConfig(poly_modulus_degree=1000)
    with pytest.raises(ConfigError, match="secure-aggregation"):
        Session.start(SecureAggConfig(poly_modulus_degree=4096, coeff_mod_bit_sizes=[60, 60, 60]))


@pytest.fixture(scope="module")
def federation(small_csbm):
    return build_federation(small_csbm, make_partition(small_csbm, "metis", 4, 0))


def fit(federation, defenses, **cfg):
    base = {"rounds": 4, "local_epochs": 1, "keep_payloads": "all"}
    return TARGETS.get("fedavg").fit(federation, {**base, **cfg}, defenses, seed=0)


def flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def test_fedavg_under_encryption_matches_plaintext_fedavg(federation):
    plain = fit(federation, [], release="last")
    secure = fit(federation, [applied("secure-aggregation", {})], release="last")
    a, b = flat(plain.global_model), flat(secure.global_model)
    assert float((a - b).norm() / a.norm()) < 1e-4
    assert secure.recipe.defenses == ()  # references train without encryption
    again = fit(federation, [applied("secure-aggregation", {})], release="last")
    assert torch.equal(flat(again.global_model), b)  # same seed, same numbers


def test_server_sees_only_ciphertexts_and_attacks_say_encrypted(federation):
    trained = fit(federation, [applied("secure-aggregation", {})])
    received = trained.transcript.received_by(SERVER)
    assert received and {m.kind for m in received} == {CIPHERTEXT}
    down = [m for m in trained.transcript.messages if m.sender == SERVER]
    assert {m.kind for m in down if m.round > 0} == {CIPHERTEXT}
    assert {m.round for m in down if m.kind == MODEL_WEIGHTS} == {0}  # the random init only
    plain_bytes = fit(federation, []).transcript.total_bytes()["up"]
    assert trained.transcript.total_bytes()["up"] > 2 * plain_bytes  # real ciphertext sizes
    view = server_view(trained, federation)
    with pytest.raises(NotApplicableError, match="encrypted"):
        observed_apis(AttackInput(view=view, candidates=None, knowledge=None), "mia-threshold")


@pytest.mark.parametrize("mode", ["central", "local"])
def test_secure_aggregation_with_dp_fedavg(federation, mode):
    """The server adds central noise in the encrypted domain; the result is DP-FedAvg's."""
    dp = applied("dp-fedavg", {"clip": 0.5, "noise_multiplier": 1.0, "mode": mode})
    sa = applied("secure-aggregation", {})
    plain = fit(federation, [dp], client_fraction=0.5, release="last")
    secure = fit(federation, [dp, sa], client_fraction=0.5, release="last")
    a, b = flat(plain.global_model), flat(secure.global_model)
    assert float((a - b).norm() / a.norm()) < 1e-4
    # the ledger says what secure aggregation changes. Central: nothing for the parties who
    # do not see the sample, and the server's "no guarantee" now says it can remove its own
    # noise. Local: everyone's view is each round's noisy sum, no longer each update.
    if mode == "central":
        assert secure.ledger.events[0] == plain.ledger.events[0]
        seen, clear = secure.ledger.events[1], plain.ledger.events[1]
        assert seen != clear and seen.scope.adversaries == ("server",)
    else:
        (seen,), (clear,) = secure.ledger.events, plain.ledger.events
        assert seen.sigma > clear.sigma and seen.scope == clear.scope
    assert secure.recipe.defenses == (dp,)
