"""examples/flower_cora, unchanged, through FlowerRecorder: what its server received is
recorded with each upload named by the client that sent it, and the server-side attacks read
it (the app's clients train on 60 % of their nodes, the members; the rest are non-members)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flower_cora import client_app, server_app, task
from flwr.common.config import get_fused_config_from_dir

from fgl_workbench.accountants import epsilons_by_adversary
from fgl_workbench.data.catalog import load_dataset
from fgl_workbench.external.flower import FlowerRecorder
from fgl_workbench.transcript import METRICS

APP = Path(__file__).resolve().parents[2] / "examples" / "flower_cora"


def test_the_example_app_is_recorded_and_its_uploads_audited(data_root):
    recorder = FlowerRecorder()
    config = get_fused_config_from_dir(APP, {})
    recorder.run_inline(server_app.app, client_app.app, 3, config)
    rounds, sent = recorder.uploads()
    assert len(rounds) == len(sent) == config["num-server-rounds"]
    assert all(sorted(r) == [0, 1, 2] for r in rounds)
    # its query for partitions and its metrics are what the server received too
    assert any(m.kind == METRICS for m in recorder.transcript.messages)
    assert recorder.ledger(3).is_empty and not epsilons_by_adversary(recorder.ledger(3), 1e-5)

    cora = load_dataset("Cora", root=data_root).data
    parts = [task.load_partition(k, 3) for k in range(3)]
    members = {k: p.nodes[p.train_mask].numpy() for k, p in enumerate(parts)}
    nonmembers = {k: p.nodes[p.test_mask].numpy() for k, p in enumerate(parts)}
    audit = recorder.audit_uploads(task.GCN(), cora, members, nonmembers=nonmembers)
    scored = audit.attacks
    assert scored, audit.summary()
    aucs = [a.metrics["auc"] for a in scored.values()]
    assert all(np.isfinite(aucs)) and max(aucs) > 0.5, audit.summary()
