"""FedAvg's privacy ledger: the events its defenses leave for a run (``ledger``), the same
ledger before training for calibration by ε (``planned_ledger``), and the personalisation
options refused beside a defense that would not cover them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fgl_workbench.accountants import PrivacyLedger
from fgl_workbench.data.federation import Federation
from fgl_workbench.defenses.base import accounted, with_selection_caveat
from fgl_workbench.defenses.dp_fedavg import (
    ledger_events,
)
from fgl_workbench.defenses.dp_sgd import ledger_event as dp_sgd_event
from fgl_workbench.defenses.gaussian_upload import ledger_events as upload_events
from fgl_workbench.errors import ConfigError
from fgl_workbench.targets.fedavg.config import SUPPORTED_DEFENSES, FedAvgConfig
from fgl_workbench.targets.training import (
    release_rule,
)


class Accounting:
    """The ledger half of the round loop (``FedAvgLoop``), which supplies ``config``,
    ``level``, ``dp_steps_per_round`` and ``uploads_before_rounds``."""

    def planned_ledger(
        self, federation: Federation, config: Any, defenses: Sequence[Any]
    ) -> PrivacyLedger:
        """The ledger ``fit`` will write, before training (calibration by ε): the same
        ``ledger`` with the counts only training tells at their most, as if the busiest client
        took part in every round (its DP-SGD steps and noisy uploads; under local DP-FedAvg
        what the server sees of its rounds, Σ 1/n_r ≤ rounds under secure aggregation).
        Nothing else depends on the run, so the real ε is at most this ledger's, and equal
        when every client takes part in every round (``client_fraction: 1``) or the count
        does not enter (central DP-FedAvg)."""
        cfg = self.config(config)
        self.check_personalisation(cfg, defenses)
        on = {d.name: d.config for d in defenses}
        steps = cfg.rounds * self.dp_steps_per_round(cfg, on.get("dp-sgd"))
        secure = "secure-aggregation" in on
        uploads = cfg.rounds + self.uploads_before_rounds
        ledger = self.ledger(cfg, defenses, steps, uploads, float(cfg.rounds), secure)
        return with_selection_caveat(ledger, release_rule(cfg.release, accounted(defenses)))

    def check_personalisation(self, cfg: FedAvgConfig, defenses: Sequence[Any]) -> None:
        """Options that deploy or score models no defense covers are refused beside it.
        Fine-tuning (node level) trains each client's deployment after the rounds, outside
        every mechanism the ledger accounts for and past what the IB or metric-DP transform;
        secure aggregation stays, as the aggregate it protects is intact. Local modules (graph
        level) are never noised by DP-FedAvg or the Gaussian upload and do not fit secure
        aggregation's vector; DP-SGD trains them with the rest, per record, and stays.
        ``score_local_models`` would report the clients' models before DP-FedAvg's or the
        Gaussian upload's noise as the defended target's figures."""
        options = (
            ("fine_tune", cfg.fine_tune, "node", {"secure-aggregation"}),
            ("keep_local", cfg.keep_local, "graph", {"dp-sgd"}),
            ("sampling", cfg.sampling, "node", set(SUPPORTED_DEFENSES)),
            (
                "score_local_models",
                cfg.score_local_models,
                self.level,
                set(SUPPORTED_DEFENSES) - {"dp-fedavg", "gaussian-upload"},
            ),
        )
        for name, on, level, allowed in options:
            if not on:
                continue
            if self.level != level:
                raise ConfigError(
                    f"{name}: {level} level only (the federation is {self.level} level)"
                )
            other = sorted(d.name for d in defenses if d.name not in allowed)
            if other:
                raise ConfigError(
                    f"{name}: the models it deploys or scores are outside what "
                    f"{', '.join(other)} covers; drop {name} or the defense"
                )

    @staticmethod
    def ledger(
        cfg: FedAvgConfig,
        defenses: Sequence[Any],
        dp_steps: int,
        uploads: int,
        server_load: float,
        secure: bool,
    ) -> PrivacyLedger:
        """Client-level DP-FedAvg (``fgl_workbench.defenses.dp_fedavg.ledger_events``): central, one
        amplified event per round for parties who do not see the sample and none for the
        server; local, the rounds each client took part in, for everyone. DP-SGD and the
        Gaussian upload mechanism: the worst client's count (each record belongs to one
        client, so its ε is the one of the client holding it)."""
        events: list[Any] = []
        for d in defenses:
            if d.name == "dp-fedavg":
                q = cfg.client_fraction
                events += ledger_events(q, d.config, cfg.rounds, server_load, secure)
            elif d.name == "dp-sgd":
                events.append(dp_sgd_event(d.config, dp_steps))
            elif d.name == "gaussian-upload":
                events += upload_events(d.config, uploads)
        return PrivacyLedger(tuple(events))
