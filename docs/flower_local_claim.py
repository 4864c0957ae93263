"""docs/accounting.md ("Found while auditing Flower 1.42", 2): LocalDpMod's own per-upload
claim, audited. One upload per canary through Flower's LocalDpMod (audits/flower.py's game),
judged against the Gaussian LocalDpMod's (ε, δ) formula implies (sensitivity = the clip) and
against the workbench's ledger (sensitivity 2·clip: a replaced client's clipped update moves
that far).

    .venv/bin/python docs/flower_local_claim.py SIGMA CANARIES SEED    # e.g. 1.0 1000 0
"""

import dataclasses
import sys

import torch

from fgl_workbench.accountants import Gaussian, PrivacyLedger, Scope, epsilon
from fgl_workbench.audits import Context
from fgl_workbench.audits.canary import judged
from fgl_workbench.audits.flower import FlowerDPGame
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.targets.flower.config import FlowerConfig
from fgl_workbench.targets.flower.engine import ledger
from fgl_workbench.targets.flower.privacy import local_dp_mod_epsilon

sigma, m, seed = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dp = DPFedAvgConfig(clip=1.0, noise_multiplier=sigma, mode="local")
cfg = FlowerConfig(rounds=1, report_metrics=False)
ctx = Context(
    ledger(cfg, dp, m, 1), {"dp-fedavg": dp}, 2 * m + 100, None, cfg.model_dump(), "flower"
)
(trial,) = FlowerDPGame().play(dp, ctx, m, torch.Generator().manual_seed(seed))
scope = Scope("client", "replace one", ("clients", "querier", "server"))
flower_claim = PrivacyLedger((Gaussian(sigma * 1.0, 1.0, 1, scope=scope),))
print("LocalDpMod's stated per-upload eps (classic formula):", round(local_dp_mod_epsilon(dp), 3))
print("Gaussian(sigma C) at sensitivity C, RDP eps:", round(epsilon(flower_claim, 1e-5).epsilon, 3))
for name, claim in (("ours (2C)", trial.claim), ("LocalDpMod's (C)", flower_claim)):
    a = judged("dp-fedavg", dataclasses.replace(trial, claim=claim), 1e-5, 0.0)
    print(name, a.summary())
