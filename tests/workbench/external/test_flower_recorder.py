"""A user's own Flower app, recorded and audited through FlowerRecorder without changing it:
its uploads reach audit_uploads, and its DP (Flower's wrappers, LocalDpMod, the metrics its
clients send) is written per adversary."""

from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fgl_workbench.accountants import PrivacyLedger, Scope, epsilons_by_adversary
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.flower.privacy import central_events, secagg_rounding

flwr = pytest.importorskip("flwr")
from flwr.app import (  # noqa: E402
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.clientapp.mod import LocalDpMod  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import (  # noqa: E402
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
)
from torch_geometric.nn import GCNConv  # noqa: E402

from fgl_workbench.external.flower import FlowerRecorder, mods_of  # noqa: E402


class GCN(torch.nn.Module):
    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(features, 16), GCNConv(16, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def user_apps(data, wrap=None, local_dp=None, weight=lambda k: 1, app_mods=(), starts=1):
    """What a Flower user writes: a ClientApp training its third of the nodes, a ServerApp
    running FedAvg (``wrap``: their DP wrapper around it; ``starts`` times over, each
    strategy's rounds counted from 1)."""
    parts = torch.arange(data.num_nodes) % 3
    client = ClientApp(mods=list(app_mods))

    @client.train(
        mods=list(local_dp) if isinstance(local_dp, list) else [local_dp] if local_dp else []
    )
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        model = GCN(data.num_features, int(data.y.max()) + 1)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        mask = parts == k
        for _ in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(model(data.x, data.edge_index)[mask], data.y[mask])
            loss.backward()
            opt.step()
        metrics = MetricRecord({"num-examples": weight(k), "train_loss": loss.item()})
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
        return Message(content, reply_to=msg)

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_evaluate=0.0, min_available_nodes=3, min_train_nodes=3)
        if wrap is not None:
            strategy = wrap(strategy)
        model = GCN(data.num_features, int(data.y.max()) + 1)
        for _ in range(starts):
            strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=3)

    return server, client, parts


SCOPE = Scope("client", "zero out", ("clients", "querier"))


@pytest.fixture(scope="module")
def data(small_csbm):
    return small_csbm.data


def test_a_users_flower_run_is_recorded_and_its_uploads_audited(data):
    server, client, parts = user_apps(data)
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rounds, sent = recorder.uploads()
    assert len(rounds) == len(sent) == 3 and all(sorted(r) == [0, 1, 2] for r in rounds)
    assert recorder.ledger(3).is_empty  # no DP: nothing claimed
    # each client's every other node as its members, every fourth as its non-members (as
    # the user's records say); the rest is the server's auxiliary pool
    members = {k: torch.nonzero(parts == k).flatten()[::2].numpy() for k in range(3)}
    nonmembers = {k: torch.nonzero(parts == k).flatten()[1::4].numpy() for k in range(3)}
    audit = recorder.audit_uploads(GCN(data.num_features, 4), data, members, nonmembers=nonmembers)
    assert audit.attacks, audit.summary()
    for scored in audit.attacks.values():
        assert 0.0 <= scored.metrics["auc"] <= 1.0


def test_flowers_central_wrapper_in_a_users_strategy_is_scoped_per_adversary(data):
    wrap = lambda s: DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3)  # noqa: E731
    server, client, _ = user_apps(data, wrap=wrap)
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rows = {r.adversary: r for r in epsilons_by_adversary(recorder.ledger(3), 1e-5)}
    config = DPFedAvgConfig(clip=1.0, noise_multiplier=2.0)
    (hidden, _) = central_events(config, 3, 3, 3, "server", removal=True)  # weights are theirs
    expected = {r.adversary: r for r in epsilons_by_adversary(PrivacyLedger((hidden,)), 1e-5)}
    assert rows["server"].epsilon == float("inf")
    assert "metrics" in rows["server"].note  # their clients report train_loss
    assert rows["querier"].epsilon == rows["clients"].epsilon == expected["querier"].epsilon


def test_unequal_weights_under_a_wrapper_without_accountant_shrink_the_noise_that_counts(data):
    """Without Flower's accountant the wrapper takes any weights: FedAvg's weighted mean lets
    the heaviest client move it by C·w_max/Σw while the noise stays σ·C/m."""
    wrap = lambda s: DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3)  # noqa: E731
    equal, unequal = FlowerRecorder(), FlowerRecorder()
    equal.run_inline(*user_apps(data, wrap=wrap)[:2], 3)
    unequal.run_inline(*user_apps(data, wrap=wrap, weight=lambda k: [1, 1, 8][k])[:2], 3)
    eps = {
        name: {r.adversary: r.epsilon for r in epsilons_by_adversary(rec.ledger(3), 1e-5)}
        for name, rec in (("equal", equal), ("unequal", unequal))
    }
    # σ·Σw/(m·w_max) = 2·10/24: the same ledger as σ = 0.83 with equal weights
    (hidden, _) = central_events(
        DPFedAvgConfig(clip=1.0, noise_multiplier=2 * 10 / 24), 3, 3, 3, "server", removal=True
    )
    expected = {
        r.adversary: r.epsilon for r in epsilons_by_adversary(PrivacyLedger((hidden,)), 1e-5)
    }
    assert eps["unequal"]["querier"] == pytest.approx(expected["querier"], rel=1e-9)
    assert eps["unequal"]["querier"] > eps["equal"]["querier"]


def test_local_dp_mod_on_a_users_client_app_is_found_and_accounted(data):
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    server, client, _ = user_apps(data, local_dp=mod)
    assert mods_of(client) == [mod]
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rows = {r.adversary: r for r in epsilons_by_adversary(recorder.ledger(3), 1e-5)}
    assert np.isfinite(rows["querier"].epsilon)
    assert rows["server"].epsilon == float("inf")  # the train_loss their clients report


def test_adaptive_clipping_leaves_infinity_for_everyone_with_the_reason(data):
    """Flower's adaptive wrapper noises the sum at the clip it has just moved, not the one
    it clipped with: no finite bound."""

    def wrap(s):
        return DifferentialPrivacyServerSideAdaptiveClipping(s, 1.0, 3, clipped_count_stddev=5.0)

    server, client, _ = user_apps(data, wrap=wrap)
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rows = epsilons_by_adversary(recorder.ledger(3), 1e-5)
    assert {r.adversary for r in rows} == {"server", "clients", "querier"}
    assert all(r.epsilon == float("inf") and "just updated" in r.note for r in rows)


class SkipsNoise(DifferentialPrivacyServerSideFixedClipping):
    def _add_noise_to_aggregated_arrays(self, aggregated):
        return aggregated


def _rows(recorder):
    return {r.adversary: r for r in epsilons_by_adversary(recorder.ledger(3), 1e-5)}


@pytest.mark.parametrize(
    "case",
    [
        "plain rounds first",
        "client-side clipping nobody applies",
        "a wrapper subclass",
        "no payloads",
    ],
)
def test_what_voids_a_users_dp_leaves_infinity_not_a_finite_claim(data, case):
    """The reviewer's cases: each made the recorder print a finite ε the run does not have
    (or, kept payloads aside, count fewer rounds than ran)."""
    from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping

    recorder = FlowerRecorder("last_round" if case == "no payloads" else "all")
    if case == "plain rounds first":
        plain, client, _ = user_apps(data)
        recorder.run_inline(plain, client, 3)
    wrapper = {
        "client-side clipping nobody applies": lambda s: DifferentialPrivacyClientSideFixedClipping(
            s, 2.0, 1.0, 3
        ),
        "a wrapper subclass": lambda s: SkipsNoise(s, 2.0, 1.0, 3),
    }.get(case, lambda s: DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3))
    server, client, _ = user_apps(data, wrap=wrapper)
    recorder.run_inline(server, client, 3)
    rows = _rows(recorder)
    if case == "no payloads":  # 3 rounds ran, 1 kept its payloads: 3 are accounted
        full = FlowerRecorder()
        full.run_inline(server, client, 3)
        assert rows["querier"].epsilon == _rows(full)["querier"].epsilon
    else:
        assert rows["querier"].epsilon == float("inf"), rows["querier"]


def test_local_dp_mod_beside_a_central_wrapper_bounds_the_run_alone(data):
    """Under LocalDpMod what the server does is post-processing of noised uploads: the
    wrapper's events are not composed in (they would only loosen the bound), so every row is
    LocalDpMod's alone."""
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    wrap = lambda s: DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3)  # noqa: E731
    server, client, _ = user_apps(data, wrap=wrap, local_dp=mod)
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    alone = FlowerRecorder()
    alone.run_inline(*user_apps(data, local_dp=mod)[:2], 3)
    assert _rows(recorder)["querier"].epsilon == _rows(alone)["querier"].epsilon < float("inf")


def _raw_mean(grid, arrays):
    """A user's own round outside any strategy: the clients' updates averaged in the clear."""
    msgs = [
        Message(RecordDict({"arrays": arrays, "config": ConfigRecord({})}), n, "train")
        for n in grid.get_node_ids()
    ]
    replies = list(grid.send_and_receive(msgs))
    states = [r.content["arrays"].to_torch_state_dict() for r in replies]
    return ArrayRecord({k: sum(s[k] for s in states) / len(states) for k in states[0]})


def test_rounds_a_users_main_runs_outside_the_dp_wrapper_void_it(data):
    """Uploads the server received outside every DP wrapper's rounds (its own grid calls
    here, seeding the wrapper with an un-noised mean) leave ∞, before or after the wrapper."""
    server, client, _ = user_apps(
        data, wrap=lambda s: DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3)
    )
    for order in ("before", "after"):
        outer = ServerApp()

        @outer.main()
        def main(grid: Grid, context: Context, order=order) -> None:
            model = GCN(data.num_features, int(data.y.max()) + 1)
            arrays = ArrayRecord(model.state_dict())
            if order == "before":
                _raw_mean(grid, arrays)
            server(grid, context)
            if order == "after":
                _raw_mean(grid, arrays)

        recorder = FlowerRecorder()
        recorder.run_inline(outer, client, 3)
        assert _rows(recorder)["querier"].epsilon == float("inf"), order


def test_a_replies_own_round_and_its_evaluate_arrays_change_nothing_accounted(data):
    """A client cannot move its reply's round with a config of its own, and arrays in its
    evaluate replies are neither uploads nor weights of the mean."""
    wrap = lambda s: DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3)  # noqa: E731
    honest = FlowerRecorder()
    honest.run_inline(*user_apps(data, wrap=wrap)[:2], 3)
    server, client, _ = user_apps(data, wrap=wrap)
    inner = client._registered_funcs["train.default"]

    def lying(msg, context):
        reply = inner(msg, context)
        reply.content["config"] = ConfigRecord({"server-round": 1})
        return reply

    client._registered_funcs["train.default"] = lying
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    assert _rows(recorder)["querier"].epsilon == _rows(honest)["querier"].epsilon
    assert len(recorder.uploads()[0]) == 3


def test_a_wrapper_whose_noise_is_replaced_on_the_instance_is_not_trusted(data):
    def wrap(s):
        wrapper = DifferentialPrivacyServerSideFixedClipping(s, 2.0, 1.0, 3)
        wrapper._add_noise_to_aggregated_arrays = lambda arrays: arrays
        return wrapper

    recorder = FlowerRecorder()
    recorder.run_inline(*user_apps(data, wrap=wrap)[:2], 3)
    assert _rows(recorder)["querier"].epsilon == float("inf")


def test_mods_found_but_contradicted_by_the_uploads_are_not_trusted(data):
    """A LocalDpMod that a wrapping mod never calls, and fixedclipping_mod followed by an
    app-wide mod that scales the update: the recorder finds the mods, and the uploads it
    kept show they did not act as claimed."""
    from flwr.clientapp.mod import fixedclipping_mod
    from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping

    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)

    def never_running(inner):
        def wrapper(msg, context, call_next):  # holds LocalDpMod, never runs it
            return call_next(msg, context) if inner is not None else None

        return wrapper

    server, client, _ = user_apps(data, local_dp=never_running(mod))
    assert mods_of(client, "train") == [mod]
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    assert _rows(recorder)["querier"].epsilon == float("inf")

    def scaling(msg, context, call_next):
        reply = call_next(msg, context)
        if msg.metadata.message_type == "train":
            sent = msg.content["arrays"].to_torch_state_dict()
            got = reply.content["arrays"].to_torch_state_dict()
            scaled = {k: sent[k] + 10 * (got[k] - sent[k]) for k in got}
            reply.content["arrays"] = ArrayRecord(scaled)
        return reply

    wrap = lambda s: DifferentialPrivacyClientSideFixedClipping(s, 2.0, 0.1, 3)  # noqa: E731
    honest = FlowerRecorder()
    honest.run_inline(*user_apps(data, wrap=wrap, local_dp=fixedclipping_mod)[:2], 3)
    assert np.isfinite(_rows(honest)["querier"].epsilon)  # clipped uploads pass the check
    server, client, _ = user_apps(
        data, wrap=wrap, local_dp=fixedclipping_mod, app_mods=[scaling]
    )  # the app-wide mod wraps the handler and its fixedclipping_mod
    assert fixedclipping_mod in mods_of(client, "train")
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    assert _rows(recorder)["querier"].epsilon == float("inf")


def test_a_node_that_never_says_its_partition_is_an_error_not_a_node_id(data):
    server, client, _ = user_apps(data)
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    (Path(recorder.registry) / "1002").unlink()  # as if node 1002 had not said
    with pytest.raises(ConfigError, match="partition-id"):
        recorder.uploads()


def _simulated(server, client):
    """The wrapped apps run on Flower's simulation engine, three nodes on Ray actors."""
    from flwr.simulation import run_simulation

    recorder = FlowerRecorder()
    run_simulation(
        server_app=recorder.server_app(server),
        client_app=recorder.client_app(client),
        num_supernodes=3,
        backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}},
    )
    return recorder


@pytest.mark.slow
def test_a_users_apps_recorded_on_flowers_simulation_engine(data):
    """Wrapped apps run as the user runs theirs (run_simulation's Ray actors): the nodes say
    which partition they are out of band, so each upload is the right client's."""
    recorder = _simulated(*user_apps(data)[:2])
    rounds, sent = recorder.uploads()
    assert len(rounds) == 3 and all(sorted(r) == [0, 1, 2] for r in rounds)


def _scaled_local_noise(factor):
    """LocalDpMod adding ``factor`` times the noise it states (its ε, δ, sensitivity kept)."""
    from flwr.clientapp.mod import localdp_mod

    real = localdp_mod.add_gaussian_noise_inplace
    return mock.patch.object(
        localdp_mod, "add_gaussian_noise_inplace", lambda a, std: real(a, factor * std)
    )


def test_local_dp_mod_noise_short_of_its_claim_is_seen_in_the_uploads(data):
    """0.6 of LocalDpMod's noise (the old check, half the expected length, let it through):
    the shortest upload is below what χ² allows for the stated noise."""
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    server, client, _ = user_apps(data, local_dp=mod)
    recorder = FlowerRecorder()
    with _scaled_local_noise(0.6):
        recorder.run_inline(server, client, 3)
    rows = _rows(recorder)
    assert rows["querier"].epsilon == float("inf")
    assert "less noise" in rows["querier"].note, rows["querier"]


def _seeded_by_round(msg, context, call_next):
    np.random.seed(int(msg.content["config"]["server-round"]))  # every client alike
    return call_next(msg, context)


def test_local_dp_mod_noise_shared_by_a_rounds_clients_is_seen(data):
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    server, client, _ = user_apps(data, local_dp=mod, app_mods=[_seeded_by_round])
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rows = _rows(recorder)
    assert rows["querier"].epsilon == float("inf")
    assert "share their noise" in rows["querier"].note, rows["querier"]


def test_the_recorders_node_folder_is_deleted():
    recorder = FlowerRecorder()
    folder = Path(recorder.registry)
    assert folder.is_dir()
    recorder.close()
    assert not folder.exists()
    again = FlowerRecorder()
    folder = Path(again.registry)
    del again
    assert not folder.exists()


def test_uploads_masked_by_secaggplus_count_as_uploads():
    """A user's app under SecAgg+ sends its (LocalDpMod-noised) updates as masked vectors:
    they are uploads all the same (counted as none, LocalDpMod's ε would read 0)."""
    from fgl_workbench.transcript import MASKED_WEIGHTS

    recorder = FlowerRecorder()
    for r in range(3):
        recorder.transcript.send(r, "node:1", "server", MASKED_WEIGHTS, {"v": torch.zeros(2)})
        recorder.message_types.append("train")
    assert recorder.busiest() == 3


def _legacy_secaggplus_apps(mods, size=2000, wrap=None, secagg=True):
    """A user's app on Flower's legacy API, the only one SecAgg+ runs on: their own
    DefaultWorkflow with SecAggPlusWorkflow (``secagg``; else Flower's plain fit workflow)
    and legacy FedAvg (``wrap``: their DP wrapper around it), a ClientApp with
    secaggplus_mod and ``mods`` inside it on training."""
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat

    client = ClientApp()

    @client.train(mods=[secaggplus_mod, *mods] if secagg else list(mods))
    def train(msg: Message, context: Context) -> Message:
        k = int(context.node_config["partition-id"])
        fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        moved = [w + 0.01 * (k + 1) for w in parameters_to_ndarrays(fitins.parameters)]
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(moved), 10, {})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    return _legacy_server([(wrap, secagg)], size), client


def _legacy_server(phases, size=2000):
    """A legacy ServerApp running ``phases`` (wrap or None, SecAgg+ or not) one after the
    other, each 3 rounds of legacy FedAvg from zeros."""
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerConfig
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        start = ndarrays_to_parameters([np.zeros(size, dtype=np.float32)])
        for wrap, secagg in phases:
            strategy = LegacyFedAvg(
                fraction_evaluate=0.0, min_fit_clients=3, min_available_clients=3,
                initial_parameters=start,
                on_fit_config_fn=lambda r: {"clipping_norm": 1.0},  # clients clip alike
            )  # fmt: skip
            if wrap is not None:
                strategy = wrap(strategy)
            legacy = LegacyContext(
                context=context, config=ServerConfig(num_rounds=3), strategy=strategy
            )
            if secagg:
                fit = SecAggPlusWorkflow(num_shares=3, reconstruction_threshold=2, max_weight=10)
                DefaultWorkflow(fit_workflow=fit)(grid, legacy)
            else:
                DefaultWorkflow()(grid, legacy)

    return server


def _legacy_local_dp():
    from flwr.client.mod import LocalDpMod as LegacyLocalDpMod

    return LegacyLocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)


def _skipped_in_round(mod, group):
    """``mod`` on every round's training but round ``group``'s (a bug a user might have)."""

    def skipping(msg, context, call_next):
        if msg.metadata.group_id == group:
            return call_next(msg, context)
        return mod(msg, context, call_next)

    return skipping


def _scaled_legacy_noise(factor):
    from flwr.client.mod import localdp_mod

    real = localdp_mod.add_localdp_gaussian_noise_to_params
    return mock.patch.object(
        localdp_mod,
        "add_localdp_gaussian_noise_to_params",
        lambda p, sensitivity, eps, delta: real(p, factor * sensitivity, eps, delta),
    )


def test_a_users_secaggplus_app_on_the_legacy_api_is_recorded_and_its_local_dp_checked():
    """The legacy API's own copy of LocalDpMod (a class of its own in Flower 1.42) is found;
    the server receives masked vectors only, counted as uploads; each node's vector is
    checked as it handed it to SecAgg+ (kept out of band), so the stated noise gives a
    finite ε against the parties the metrics do not reach."""
    mod = _legacy_local_dp()
    server, client = _legacy_secaggplus_apps([mod])
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    assert recorder.busiest() == 3
    rounds, _ = recorder.uploads()
    assert sum(len(r) for r in rounds) == 0  # no upload reaches the server in the clear
    assert mods_of(client, "train") == [mod]
    updates, unkept = recorder._uploaded_updates()
    assert len(updates) == 9 and unkept == 0
    row = _rows(recorder)["querier"]
    assert 0 < row.epsilon < float("inf"), row


@pytest.mark.parametrize(
    "case, reason",
    [
        ("a third of the noise", "less noise"),
        ("skipped in round 2", "less noise"),
        ("a node outside the recorder", "without the vector their node masked"),
    ],
)
def test_a_users_secaggplus_app_whose_local_dp_did_not_run_as_stated_is_not_trusted(case, reason):
    """What the masked vectors hid (a review's breaks: noise short, a round skipped, a
    node the recorder did not wrap) leaves ∞ for everyone, with the reason."""
    mod = _legacy_local_dp()
    mods = [_skipped_in_round(mod, "2")] if case.startswith("skipped") else [mod]
    server, client = _legacy_secaggplus_apps(mods)
    recorder = FlowerRecorder()
    with _scaled_legacy_noise(1 / 3 if case.startswith("a third") else 1.0):
        recorder.run_inline(server, client, 3)
    if case.startswith("a node"):
        next(recorder.premask.glob("*-2-*.npz")).unlink()
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and reason in row.note, row


@pytest.mark.slow
def test_what_a_users_secaggplus_nodes_masked_is_kept_on_flowers_simulation_engine():
    """On run_simulation's Ray actors (each node's masking stage runs where the actor does),
    every node's vector of every round is kept, and the stated noise holds."""
    recorder = _simulated(*_legacy_secaggplus_apps([_legacy_local_dp()]))
    updates, unkept = recorder._uploaded_updates()
    assert len(updates) == 9 and unkept == 0
    assert _rows(recorder)["querier"].epsilon < float("inf")


def _legacy_client_side(noise=2.0):
    from flwr.server.strategy import DifferentialPrivacyClientSideFixedClipping as Legacy

    return lambda strategy: Legacy(strategy, noise, 1.0, 3)


def _central_rows(rounding=None, noise=2.0):
    """What the built-in accountant gives Flower's client-side wrapper at clip 1, σ
    ``noise``, 3 of 3 clients, 3 rounds."""
    config = DPFedAvgConfig(clip=1.0, noise_multiplier=noise)
    hidden, _ = central_events(config, 3, 3, 3, "client", removal=True, rounding=rounding)
    return {r.adversary: r for r in epsilons_by_adversary(PrivacyLedger((hidden,)), 1e-5)}


def _server_fn_app(wrap, initial=True):
    """A legacy ServerApp built from ``server_fn`` (run by Flower's legacy ``Server``;
    ``initial``: it names its initial model, else Flower asks a client for one)."""
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg

    def server_fn(context: Context) -> ServerAppComponents:
        strategy = LegacyFedAvg(
            fraction_evaluate=0.0, min_fit_clients=3, min_available_clients=3,
            initial_parameters=(
                ndarrays_to_parameters([np.zeros(2000, dtype=np.float32)]) if initial else None
            ),
        )  # fmt: skip
        return ServerAppComponents(strategy=wrap(strategy), config=ServerConfig(num_rounds=3))

    return ServerApp(server_fn=server_fn)


@pytest.mark.parametrize("run_by", ["DefaultWorkflow", "server_fn"])
def test_a_legacy_apps_dp_wrapper_is_accounted_as_the_message_apis(data, run_by):
    """The legacy API's client-side wrapper (a class of its own; unread, no claim was
    made) is accounted as the Message API's, run by either of the legacy API's servers:
    Gaussian against the clients and the querier, ∞ against the server that sees each
    clipped update."""
    from flwr.client.mod import fixedclipping_mod as legacy_clipping

    server, client = _legacy_secaggplus_apps(
        [legacy_clipping], wrap=_legacy_client_side(), secagg=False
    )
    if run_by == "server_fn":
        server = _server_fn_app(_legacy_client_side())
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rows = _rows(recorder)
    assert rows["querier"].epsilon == rows["clients"].epsilon == _central_rows()["querier"].epsilon
    assert rows["server"].epsilon == float("inf") and "clipped update" in rows["server"].note


def test_a_legacy_wrapper_under_secaggplus_counts_its_rounding_and_not_the_server(data):
    """Client-side clipping under SecAgg+ (Flower's documented pairing): the server unmasks
    the clipped sum before its noise (∞ against it); against the clients and the querier
    SecAgg+'s quantisation adds to the sensitivity (ε above the plain wrapper's)."""
    from flwr.client.mod import fixedclipping_mod as legacy_clipping

    server, client = _legacy_secaggplus_apps([legacy_clipping], wrap=_legacy_client_side())
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    rows = _rows(recorder)
    rounding = secagg_rounding(8.0, 4194304, 1.0, 2000)  # weight 10 of max_weight 10
    assert rows["querier"].epsilon == pytest.approx(_central_rows(rounding)["querier"].epsilon)
    assert rows["querier"].epsilon > _central_rows()["querier"].epsilon
    assert rows["server"].epsilon == float("inf") and "unmasks" in rows["server"].note


@pytest.mark.parametrize(
    "wrap, reason",
    [
        ("server-side under SecAgg+", "holds the round's sum only"),
        ("deprecated DPFedAvgFixed", "deprecated"),
    ],
)
def test_legacy_dp_that_holds_nothing_leaves_infinity(data, wrap, reason):
    from flwr.server.strategy import DifferentialPrivacyServerSideFixedClipping, DPFedAvgFixed

    wrappers = {
        "server-side under SecAgg+": lambda s: DifferentialPrivacyServerSideFixedClipping(
            s, 2.0, 1.0, 3
        ),
        "deprecated DPFedAvgFixed": lambda s: DPFedAvgFixed(s, 3, 1.0, 2.0),
    }
    server, client = _legacy_secaggplus_apps([], wrap=wrappers[wrap], secagg=wrap.endswith("+"))
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and reason in row.note, row


def _seeded_by_client(msg, context, call_next):
    np.random.seed(int(context.node_config["partition-id"]))  # the same noise every round
    return call_next(msg, context)


class _BareBiases(LocalDpMod):
    """A LocalDpMod of the user's own: not Flower's code, whatever it does."""


@pytest.mark.parametrize(
    "case, reason",
    [
        ("noise reused across rounds", "share their noise"),
        ("a subclass of LocalDpMod", "subclasses Flower's LocalDpMod"),
    ],
)
def test_local_dp_that_a_review_found_trusted_is_not(data, case, reason):
    """Two of a review's finite claims (2026-11-27): a client seeding its generator by its
    own id (the server subtracts two of its uploads), and a mod subclassing LocalDpMod."""
    if case.startswith("noise"):
        mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
        apps = user_apps(data, local_dp=mod, app_mods=[_seeded_by_client])
    else:
        apps = user_apps(data, local_dp=_BareBiases(1.0, 1.0, 5.0, 1e-5))
    recorder = FlowerRecorder()
    recorder.run_inline(*apps[:2], 3)
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and reason in row.note, row


def test_a_main_running_two_strategies_is_checked_step_by_step(data):
    """Rounds count from 1 again in a second start: each upload is read against the model
    its own strategy sent (against the other's, correct noise failed the shape test), and
    every upload reaches the audit."""
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    recorder = FlowerRecorder()
    recorder.run_inline(*user_apps(data, local_dp=mod, starts=2)[:2], 3)
    rounds, sent = recorder.uploads()
    assert len(rounds) == len(sent) == 6 and all(len(r) == 3 for r in rounds)
    assert _rows(recorder)["querier"].epsilon < float("inf")


def test_client_side_clipping_beside_local_dp_mod_stays_finite(data):
    """LocalDpMod's noise lengthens clipped updates past the wrapper's clip, legitimately:
    the clip check stands down where LocalDpMod bounds the run (it read ∞ before)."""
    from flwr.clientapp.mod import fixedclipping_mod
    from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping

    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    wrap = lambda s: DifferentialPrivacyClientSideFixedClipping(s, 2.0, 1.0, 3)  # noqa: E731
    # LocalDpMod outside: it clips and noises what fixedclipping_mod clipped (the other order
    # clips the noise away, which no test can then tell from none: ∞)
    server, client, _ = user_apps(data, wrap=wrap, local_dp=[mod, fixedclipping_mod])
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    assert _rows(recorder)["querier"].epsilon < float("inf")


def test_masked_rounds_outside_the_dp_wrapper_void_it():
    """A main that runs plain FedAvg under SecAgg+ before its DP wrapper: those rounds
    released an un-noised mean, masked uploads or not (they were not counted: a review)."""
    from flwr.client.mod import fixedclipping_mod as legacy_clipping

    _, client = _legacy_secaggplus_apps([legacy_clipping])
    server = _legacy_server([(None, True), (_legacy_client_side(), True)])
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and "outside every DP wrapper" in row.note, row


def test_a_secaggplus_sum_that_can_wrap_is_not_trusted():
    """Six uploads of quantization_range 2³⁰ overflow a 2³² modulus: one client's change
    can move the unmasked mean anywhere (Flower warns of num_shares only)."""
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import SecAggPlusWorkflow

    from fgl_workbench.external.flower import strategy_events

    wrapper = _legacy_client_side()(LegacyFedAvg())
    secagg = SecAggPlusWorkflow(6, 3, max_weight=10, quantization_range=2**30)
    replies = [[{"num_examples": 10}] * 6]
    fits = strategy_events(wrapper, 1, 6, replies, secagg, 2000, masked_per_round=3)
    assert not any("wrap" in getattr(e, "reason", "") for e in fits)
    wraps = strategy_events(wrapper, 1, 6, replies, secagg, 2000, masked_per_round=6)
    assert any("can wrap its modulus_range" in getattr(e, "reason", "") for e in wraps)


def test_an_initial_model_from_a_clients_get_parameters_reaches_everyone():
    """Without initial_parameters Flower's legacy server starts from one client's
    get_parameters reply and sends it to every client: un-noised, for everyone."""
    from flwr.client import NumPyClient
    from flwr.client.mod import fixedclipping_mod as legacy_clipping

    class Client(NumPyClient):
        def get_parameters(self, config):
            return [np.ones(2000, dtype=np.float32)]

        def fit(self, parameters, config):
            return [parameters[0] + 0.01], 10, {}

    client = ClientApp(client_fn=lambda ctx: Client().to_client(), mods=[legacy_clipping])

    recorder = FlowerRecorder()
    recorder.run_inline(_server_fn_app(_legacy_client_side(), initial=False), client, 3)
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and "get_parameters" in row.note, row


def test_a_closed_recorder_records_nothing(data):
    recorder = FlowerRecorder()
    recorder.close()
    with pytest.raises(ConfigError, match="closed"):
        recorder.run_inline(*user_apps(data)[:2], 3)


def test_recording_a_users_app_runs_flowers_clipping_as_shipped():
    """The workbench's own flower target guards Flower's clipping against a zero update;
    importing the recorder must not: the audit is of Flower's code as the user runs it."""
    import subprocess
    import sys

    code = (
        "import fgl_workbench.external.flower\n"
        "from flwr.supercore import differential_privacy as d\n"
        "assert not getattr(d.clip_inputs_inplace, 'zero_safe', False)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _augmenting_seeded_by_round(msg, context, call_next):
    """Clients seeding numpy with the round, then drawing as many numbers as they hold
    partitions before LocalDpMod draws: one noise stream, shifted from client to client."""
    np.random.seed(int(msg.content["config"]["server-round"]))
    np.random.normal(size=16 * (int(context.node_config["partition-id"]) + 1))
    return call_next(msg, context)


def test_local_dp_noise_shared_shifted_by_some_entries_is_seen(data):
    """A review's finite claim (ε 3.2 on 340 entries): the same stream shifted by 16 entries
    from one client to the next, which the lag-0 comparison misses; aligned, two uploads
    differ by 0.7 < 2C and the server cancels the noise."""
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    server, client, _ = user_apps(data, local_dp=[mod, _augmenting_seeded_by_round])
    recorder = FlowerRecorder()
    recorder.run_inline(server, client, 3)
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and "shifted" in row.note, row


def test_uploads_of_another_train_action_count_as_training(data):
    """A ``@client.train("finetune")`` handler without DP, whose replies the user's main
    averages itself after the strategy: those uploads were not read as training (finite ε:
    a review); now they void LocalDpMod's bound, for everyone."""
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=5.0, delta=1e-5)
    server, client, _ = user_apps(data, local_dp=mod)

    @client.train("finetune")  # no DP: "only a short fine-tune"
    def finetune(msg: Message, context: Context) -> Message:
        state = {k: v + 0.01 for k, v in msg.content["arrays"].to_torch_state_dict().items()}
        metrics = MetricRecord({"num-examples": 1})
        return Message(RecordDict({"arrays": ArrayRecord(state), "metrics": metrics}), reply_to=msg)

    finetuning = ServerApp()

    @finetuning.main()
    def main(grid: Grid, context: Context) -> None:
        server(grid, context)
        model = GCN(data.num_features, int(data.y.max()) + 1)
        content = RecordDict(
            {"arrays": ArrayRecord(model.state_dict()), "config": ConfigRecord({"server-round": 4})}
        )
        msgs = [
            Message(content, dst_node_id=n, message_type="train.finetune")
            for n in grid.get_node_ids()
        ]
        list(grid.send_and_receive(msgs))

    recorder = FlowerRecorder()
    recorder.run_inline(finetuning, client, 3)
    assert recorder.busiest() == 4
    row = _rows(recorder)["querier"]
    assert row.epsilon == float("inf") and "train.finetune uploads without it" in row.note, row
