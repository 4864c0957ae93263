"""The flower target on Flower's Deployment Engine: its config, what the SuperNodes rebuild,
the ServerApp's record read back as data alone, a failed run told apart from a completed
one, and (slow: it starts a SuperLink and SuperNodes) the inline run's numbers."""

import json
import os
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from fgl_workbench.data.federation import build_federation
from fgl_workbench.data.recipe import FederationRecipe, client_digest
from fgl_workbench.defenses import AppliedDefense
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets import TARGETS
from fgl_workbench.transcript import Message

pytest.importorskip("flwr")

from fgl_workbench.targets.flower import record  # noqa: E402
from fgl_workbench.targets.flower.config import FlowerConfig  # noqa: E402
from fgl_workbench.targets.flower.deployed import DeployedRun, own_client  # noqa: E402
from fgl_workbench.targets.flower.superlink import (  # noqa: E402
    Connection,
    DeploymentError,
    run_app,
)

CSBM = {"num_nodes": 400, "num_classes": 4, "num_features": 16, "seed": 3}
RECIPE = FederationRecipe(
    dataset="csbm", dataset_params=CSBM, method="louvain", num_clients=3, seed=0
)
CONFIG = {"model": {"arch": "gcn", "hidden": 16}, "rounds": 2, "local_epochs": 2}


@pytest.mark.parametrize(
    ("deployment", "field", "expected"),
    [
        ({"superlink": "10.0.0.7"}, "deployment.superlink", "HOST:PORT"),
        ({"superlink": "host:99999"}, "deployment.superlink", "HOST:PORT"),
        ({"run_timeout": 0}, "deployment.run_timeout", "greater than 0"),
        ({"superlnk": "local"}, "deployment.superlnk", "Extra inputs"),
    ],
)
def test_bad_deployment_config_names_the_field(deployment, field, expected):
    with pytest.raises(ValidationError) as caught:
        FlowerConfig(backend="deployment", deployment=deployment)
    assert field in str(caught.value) and expected in str(caught.value)


def test_a_remote_superlink_is_host_and_port():
    cfg = FlowerConfig(backend="deployment", deployment={"superlink": "fl.example.org:9093"})
    assert cfg.deployment.superlink == "fl.example.org:9093"


def test_references_of_a_deployed_run_train_inline():
    """A reference federation is not the cell's: no SuperNode could rebuild it."""
    from fgl_workbench.targets.flower.target import run_only

    for fraction in (1.0, 0.5):
        cfg = FlowerConfig(backend="deployment", client_fraction=fraction)
        assert {"backend", "deployment"} <= run_only(cfg)
    assert "backend" not in run_only(FlowerConfig(backend="simulation", client_fraction=0.5))


def test_a_federation_that_does_not_say_how_it_was_cut_is_refused(small_csbm):
    federation = build_federation(small_csbm, RECIPE.partition(small_csbm))
    with pytest.raises(ConfigError, match="backend: deployment rebuilds each client's data"):
        TARGETS.get("flower").fit(federation, {**CONFIG, "backend": "deployment"}, [], 0)


def _run(digests: list[str]) -> DeployedRun:
    return DeployedRun(
        federation=RECIPE,
        digests=digests,
        target=FlowerConfig(**CONFIG, backend="deployment"),
        defense=None,
        in_dim=16,
        num_classes=4,
        level="node",
        seed=1,
        record_dir="/nonexistent",
        validated=True,
        names=["w"],
        weight_bound=None,
    )


def _uploads(defense) -> list[torch.Tensor]:
    """The deployed ClientApp answering one round-1 train message on nodes 0 and 1 (an
    inline grid given the run config every SuperNode reads): each upload's move."""
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict
    from flwr.app import Message as FlowerMessage

    from fgl_workbench.models import ModelSpec
    from fgl_workbench.targets.flower.deployed import RUN_KEY, DeployedClientApp
    from fgl_workbench.targets.flower.engine import stamp_identity
    from fgl_workbench.targets.flower.grid import FIRST_NODE_ID, InlineGrid

    stamp_identity()
    run = _run([client_digest(c) for c in RECIPE.build().clients]).model_copy(
        update={"defense": defense}
    )
    torch.manual_seed(0)
    start = ModelSpec(run.target.model, 16, 4, "node").build().state_dict()
    grid = InlineGrid(DeployedClientApp(), 3, {RUN_KEY: run.model_dump_json()})
    moves = []
    for k in (0, 1):
        content = RecordDict(
            {"arrays": ArrayRecord(start), "config": ConfigRecord({"server-round": 1})}
        )
        msg = FlowerMessage(content, dst_node_id=FIRST_NODE_ID + k, message_type="train")
        (reply,) = grid.send_and_receive([msg])
        state = reply.content["arrays"].to_torch_state_dict()
        moves.append(torch.cat([(state[n] - start[n]).flatten().double() for n in start]))
    return moves


def test_deployed_clients_draw_their_local_dp_noise_apart():
    """Each SuperNode draws LocalDpMod's noise from its own entropy: with one seed from the
    run config every client added the same noise (the server's difference of two uploads
    was noise-free) and the server, reading that config too, could redraw it."""
    clean = _uploads(None)
    noisy = _uploads(DPFedAvgConfig(mode="local", clip=1.0, noise_multiplier=1.0))
    z0, z1 = noisy[0] - clean[0], noisy[1] - clean[1]
    assert float((z0 - z1).norm() / z0.norm()) > 1.0  # independent: about √2
    assert "server_seed" not in DeployedRun.model_fields  # the server's seed stays server-side


def test_a_supernode_whose_data_differs_from_the_workbenchs_refuses_to_take_part():
    digests = [client_digest(c) for c in RECIPE.build().clients]
    assert client_digest(own_client(_run(digests).model_dump_json(), 1)) == digests[1]
    planted = [digests[0], digests[0], digests[2]]  # client 1 expected to hold client 0's data
    with pytest.raises(ConfigError, match="client 1's data rebuilt on this SuperNode differs"):
        own_client(_run(planted).model_dump_json(), 1)
    with pytest.raises(ConfigError, match="partition-id: 3 is not a client"):
        own_client(_run(digests).model_dump_json(), 3)


def _record() -> record.ServerRecord:
    weights = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}
    return record.ServerRecord(
        messages=[
            Message(0, "server", "node:7", "model_weights", 120, weights),
            Message(0, "server", "node:9", "model_weights", 120, weights),
            Message(0, "node:7", "server", "metrics", 30, {"train_loss": 0.5}),
        ],
        arrays={"w": torch.zeros(2, 3)},
        train_metrics={1: {"train_loss": 0.5}},
        evaluate_metrics={1: {"accuracy": float("nan")}},
        figures={"flower_epsilon": 1.5},
        nodes={"node:7": "client:0", "node:9": "client:1"},
    )


def test_the_servers_record_comes_back_whole(tmp_path):
    written = _record()
    record.write_record(tmp_path, written)
    read = record.read_record(tmp_path)
    assert [m.nbytes for m in read.messages] == [120, 120, 30]
    assert torch.equal(read.messages[1].payload["w"], written.messages[1].payload["w"])
    assert read.messages[2].payload == {"train_loss": 0.5}
    assert read.nodes == written.nodes and read.figures == written.figures
    assert np.isnan(read.evaluate_metrics[1]["accuracy"])
    with np.load(tmp_path / "record.npz") as npz:
        assert len(npz.files) == 3  # the broadcast payload stored once


def test_secaggplus_bytes_in_a_record_come_back_as_bytes(tmp_path):
    """SecAgg+'s keys, ciphertexts and masked vectors are bytes: stored as uint8 arrays in
    the npz (never in the JSON), read back as the same bytes."""
    shares = {"ciphertexts": [b"\x00\x01secret", b""], "nids": [3, 4]}
    written = _record()
    written.messages.append(Message(0, "node:7", "server", "key_shares", 80, shares))
    record.write_record(tmp_path, written)
    assert "secret" not in (tmp_path / "record.json").read_text()
    assert record.read_record(tmp_path).messages[-1].payload == shares


class _Planted:
    """Unpickling it writes a marker file: what a record must never do when read."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def test_a_record_larger_than_an_honest_run_could_write_is_refused(tmp_path):
    """A small file unpacking to more than the run's rounds, clients and model allow (a
    decompression bomb) is refused before it is unpacked."""
    from fgl_workbench.targets.flower.deployed import record_limits

    record.write_record(tmp_path, _record())
    cfg = FlowerConfig(**CONFIG, backend="deployment")
    honest = record_limits(cfg, 2, {"w": torch.zeros(2, 3), "b": torch.zeros(3)})
    assert record.read_record(tmp_path, *honest).nodes == _record().nodes
    with pytest.raises(record.RecordError, match="record"):
        record.read_record(tmp_path, 64)
    with pytest.raises(record.RecordError, match="record"):
        record.read_record(tmp_path, honest[0], 64)


def test_reading_a_record_runs_no_code(tmp_path):
    marker = tmp_path / "marker"
    record.write_record(tmp_path, _record())
    planted = np.empty(1, dtype=object)
    planted[0] = _Planted(marker)
    np.savez(tmp_path / "record.npz", a0=planted, a1=np.zeros(3), a2=np.zeros(3))
    with pytest.raises(record.RecordError, match="unreadable"):
        record.read_record(tmp_path)
    # the planted file is live: np.load with pickles allowed does run it
    with np.load(tmp_path / "record.npz", allow_pickle=True) as npz:
        npz["a0"]
    assert marker.exists()
    marker.unlink()
    (tmp_path / "initial.json").write_text(json.dumps({"w": {"__array__": "a0"}}))
    (tmp_path / "initial.npz").write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.raises(record.RecordError):
        record.read(tmp_path, record.INITIAL)
    assert not marker.exists()


def test_a_servers_failure_is_its_record(tmp_path):
    record.write_failure(tmp_path, RuntimeError("3 of 4 SuperNodes connected"))
    with pytest.raises(record.RecordError, match="RuntimeError: 3 of 4 SuperNodes connected"):
        record.read_record(tmp_path)


class _Answering(Connection):
    """A connection whose ``flwr`` answers as a SuperLink whose run then failed does."""

    def flwr(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        if args[0] == "run":
            return subprocess.CompletedProcess(args, 0, "Successfully started run 42\n", "")
        runs = {"runs": [{"run-id": "42", "status": "finished:failed"}]}
        return subprocess.CompletedProcess(args, 0, json.dumps(runs), "")


def test_a_run_that_failed_is_an_error_though_flwr_run_exits_0(tmp_path):
    log = tmp_path / "supernode-0.log"
    log.write_text("ValueError: this node's traceback\n")
    conn = _Answering(dict(os.environ), "127.0.0.1:1", [log])
    with pytest.raises(DeploymentError, match="run 42 ended finished:failed") as caught:
        run_app(conn, tmp_path, timeout=10)
    assert "this node's traceback" in str(caught.value)


def _inline_and_deployed(config, tmp_path, atol):
    """The federation without DP inline and through a local SuperLink and SuperNodes, their
    released models equal to ``atol``."""
    federation, flower = RECIPE.build(), TARGETS.get("flower")
    deployment = {"record_dir": str(tmp_path), "run_timeout": 900}
    inline = flower.fit(federation, config, [], 0)
    deployed = flower.fit(
        federation, {**config, "backend": "deployment", "deployment": deployment}, [], 0
    )
    for key, value in inline.global_model.state_dict().items():
        torch.testing.assert_close(
            deployed.global_model.state_dict()[key], value, atol=atol, rtol=0
        )
    return inline, deployed


@pytest.mark.slow
def test_the_deployment_engine_gives_the_inline_runs_numbers(tmp_path):
    """A SuperLink and three SuperNodes on this machine (about two minutes a run on two
    cores: Flower starts a ClientApp process per message). Without DP the model agrees with
    inline's to float rounding (Flower sums the replies in its random node ids' order), the
    utility and history exactly, and the transcript names the same clients once renamed.
    Under Flower's server-side DP the ledger and Flower's ε are inline's, but the noise is
    not: every party draws it from its own entropy, never from a seed (a 32-bit seed can be
    searched by whoever holds the noised model)."""
    federation = RECIPE.build()
    config = {**CONFIG, "keep_payloads": "all"}
    deployment = {"record_dir": str(tmp_path), "run_timeout": 900}
    flower = TARGETS.get("flower")
    inline, deployed = _inline_and_deployed(config, tmp_path, atol=1e-5)
    assert deployed.utility == inline.utility
    assert deployed.history == [pytest.approx(row, abs=1e-6) for row in inline.history]
    parties = {(m.round, m.sender, m.receiver, m.kind) for m in deployed.transcript.messages}
    assert parties == {(m.round, m.sender, m.receiver, m.kind) for m in inline.transcript.messages}
    # the sizes are Flower's serialised messages: larger than inline's by the metadata a
    # deployment stamps (64-bit node and run ids, message ids)
    assert all(m.nbytes > 0 for m in deployed.transcript.messages)
    assert list(tmp_path.iterdir()) == []  # the record folder is cleared after reading
    dp = [
        AppliedDefense("dp-fedavg", "aggregation", DPFedAvgConfig(clip=1.0, noise_multiplier=0.5))
    ]
    noised = flower.fit(federation, config, dp, 0)
    noised_deployed = flower.fit(
        federation, {**config, "backend": "deployment", "deployment": deployment}, dp, 0
    )
    assert noised_deployed.ledger == noised.ledger
    assert noised_deployed.utility["flower_epsilon"] == noised.utility["flower_epsilon"]
    w, v = (m.global_model.state_dict()["convs.0.lin.weight"] for m in (noised_deployed, noised))
    assert not torch.allclose(w, v, atol=1e-3)  # its own noise


@pytest.mark.slow
def test_secaggplus_runs_on_the_deployment_engine(tmp_path):
    """Flower's SecAgg+ through a SuperLink and three SuperNodes: every stage recorded as
    inline records it (masked vectors, shares, the unmasked aggregate), the model inline's to
    SecAgg+'s quantisation."""
    config = {**CONFIG, "keep_payloads": "all", "secure_aggregation": "secaggplus"}
    inline, deployed = _inline_and_deployed(config, tmp_path, atol=1e-4)
    kinds = {(m.round, m.sender, m.receiver, m.kind) for m in deployed.transcript.messages}
    assert kinds == {(m.round, m.sender, m.receiver, m.kind) for m in inline.transcript.messages}
    assert deployed.ledger == inline.ledger


def test_a_records_figures_never_stand_in_for_what_the_workbench_measures(monkeypatch, tmp_path):
    """A hostile ServerApp's record claimed accuracy 0.99 and a Flower ε for a run without DP
    (a review): the measured utility is the workbench's own and Flower's ε is taken only where
    Flower's accountant ran."""
    import contextlib

    from fgl_workbench.targets.flower import deployed

    def submit(conn, app, folder, timeout):
        start = record.read(folder, record.INITIAL)
        figures = {"accuracy": 0.99, "auc": 0.99, "flower_epsilon": 1e-3}
        record.write_record(folder, record.ServerRecord([], start["model"], {}, {}, figures, {}))

    monkeypatch.setattr(deployed, "local_deployment", lambda *a: contextlib.nullcontext(None))
    monkeypatch.setattr(deployed, "submit", submit)
    cfg = {**CONFIG, "backend": "deployment", "deployment": {"record_dir": str(tmp_path)}}
    out = TARGETS.get("flower").fit(RECIPE.build(), cfg, [], 0)
    assert out.utility["accuracy"] != 0.99 and "flower_epsilon" not in out.utility
