"""Your own Flower federation, recorded and audited without changing your code.

``FlowerRecorder`` wraps your ``ServerApp`` and ``ClientApp``: the server's ``Grid`` is
recorded (every message it sends and every reply it receives, with its serialised size, as
the workbench's own ``flower`` target records its federations), the strategies your
``main`` starts are kept, and each node says which of your partitions it is out of band (in
a folder only the recorder reads; the server sees node ids, as a real one does). Run the
wrapped apps however you run yours: ``run_simulation``, ``flwr run`` on a deployment whose
nodes share the recorder's folder, or ``run_inline`` here. Then:

- ``uploads()`` gives what each client uploaded each round and the model it was sent, the
  input of ``audit_uploads`` (``recorder.audit_uploads(model, data, members)`` passes them);
- ``ledger()`` writes the ε of Flower's DP your apps ran, per adversary
  (``fgl_workbench.targets.flower.privacy``): the fixed-clipping wrappers your strategy is
  wrapped in (Message API or legacy, under the legacy SecAgg+ workflow too), ``LocalDpMod``
  on your ClientApp (checked on the uploads, or under SecAgg+ on what each node masked:
  ``fgl_workbench.external.premask``), the metrics your clients sent back (∞ against the
  server); what voids it leaves ∞ with the reason: adaptive clipping (Flower noises at the
  clip it has just moved), a subclass of a wrapper, a wrapper around another aggregate,
  rounds without a wrapper, client-side clipping without ``fixedclipping_mod``, server-side
  clipping under SecAgg+, uploads that contradict the mods."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from flwr.app import Context, RecordDict
from flwr.client.mod import LocalDpMod as LegacyLocalDpMod
from flwr.client.mod import fixedclipping_mod as legacy_fixedclipping_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod
from flwr.server import Server
from flwr.server import strategy as legacy
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import ServerApp
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
    FedProx,
    Strategy,
)

from fgl_workbench.accountants import NoGuarantee, PrivacyLedger, Scope
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig
from fgl_workbench.errors import ConfigError
from fgl_workbench.external.model import ModelAudit
from fgl_workbench.external.noise_checks import noise_problems
from fgl_workbench.external.premask import PreMaskClientApp, kept_uploads
from fgl_workbench.targets.flower import privacy
from fgl_workbench.targets.flower.apps import muted_flower
from fgl_workbench.targets.flower.engine import stamp_identity
from fgl_workbench.targets.flower.grid import (
    InlineGrid,
    NotingClientApp,
    RecordingGrid,
    node_party,
    noted_clients,
)
from fgl_workbench.transcript import (
    MASKED_WEIGHTS,
    METRICS,
    MODEL_WEIGHTS,
    SERVER,
    KeepPayloads,
    Transcript,
)

State = dict[str, torch.Tensor]
# Flower 1.42 keeps two copies of its client DP mods: the Message API's and the legacy API's
# (what an app built on SecAgg+'s legacy workflow imports)
LOCAL_DP_MODS = (LocalDpMod, LegacyLocalDpMod)
CLIPPING_MODS = (fixedclipping_mod, legacy_fixedclipping_mod)
# and two of its DP wrappers: the Message API's (``flwr.serverapp.strategy``) and the legacy
# API's (``flwr.server.strategy``, what an app on SecAgg+'s workflow or ``server_fn`` uses)
LEGACY_DP_WRAPPERS = (
    legacy.DifferentialPrivacyServerSideFixedClipping,
    legacy.DifferentialPrivacyClientSideFixedClipping,
    legacy.DifferentialPrivacyServerSideAdaptiveClipping,
    legacy.DifferentialPrivacyClientSideAdaptiveClipping,
)
DP_WRAPPERS = (
    DifferentialPrivacyServerSideFixedClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyClientSideAdaptiveClipping,
    *LEGACY_DP_WRAPPERS,
)
CLIENT_SIDE_FIXED = (
    DifferentialPrivacyClientSideFixedClipping,
    legacy.DifferentialPrivacyClientSideFixedClipping,
)
# Flower's deprecated DP-FedAvg wrappers (legacy API): recognised, not accounted
DEPRECATED_DP = (legacy.DPFedAvgFixed, legacy.DPFedAvgAdaptive)


class FlowerRecorder:
    """Records one run of your Flower apps (``keep_payloads``: which rounds' payloads are
    kept; ``all`` by default, as the upload attacks read every round)."""

    def __init__(self, keep_payloads: KeepPayloads = "all") -> None:
        self.transcript = Transcript(keep_payloads, always_keep=(METRICS,))
        self.strategies: list[Strategy] = []
        # each started strategy's stretch of the transcript: [first, end) message indices
        self.spans: list[tuple[Strategy, int, int]] = []
        # the Flower message type (train, evaluate, ...) of each transcript message
        self.message_types: list[str] = []
        self.client_apps: list[ClientApp] = []
        # the SecAgg+ workflow a legacy strategy ran its training rounds through
        self.secagg: dict[int, SecAggPlusWorkflow] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="fglwb-flower-nodes-"))
        # which partition each node is; what each node handed SecAgg+ before masking
        self.registry, self.premask = self.folder / "nodes", self.folder / "premask"
        self.registry.mkdir(), self.premask.mkdir()
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.folder, True)

    def server_app(self, app: ServerApp) -> ServerApp:
        """``app`` with its grid recorded and the strategies it starts kept."""
        wrapped = ServerApp()

        @wrapped.main()
        def main(grid: Any, context: Context) -> None:
            recording = RecordingGrid(grid, self.transcript)
            try:
                with self._capturing():
                    app(recording, context)
            finally:
                self.message_types += recording.message_types

        return wrapped

    def client_app(self, app: ClientApp) -> ClientApp:
        """``app`` with each node noting which partition (``node_config["partition-id"]``) it
        is and, where the app runs DP mods, what it handed SecAgg+ to mask (one model a node
        and round on disk until ``close``: ``fgl_workbench.external.premask``), for the
        recorder only."""
        self.client_apps.append(app)
        inner = PreMaskClientApp(app, self.premask) if mods_of(app) else app
        return NotingClientApp(inner, self.registry)

    def run_inline(
        self,
        server_app: ServerApp,
        client_app: ClientApp,
        num_nodes: int,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        """Your apps through the recorder on the workbench's in-process grid: node k holds
        partition k (``node_config["partition-id"]``, ``"num-partitions"``); the ServerApp
        and every node get ``run_config`` (your ``[tool.flwr.app.config]``)."""
        if not self.folder.is_dir():
            raise ConfigError("FlowerRecorder: closed; record another run with a new one")
        grid = InlineGrid(self.client_app(client_app), num_nodes, run_config)
        wrapped = self.server_app(server_app)
        context = Context(1, 1, {}, RecordDict(), dict(run_config or {}))
        stamp_identity()
        with muted_flower():
            wrapped(grid, context)

    @contextmanager
    def _capturing(self) -> Iterator[None]:
        """Every strategy run inside is kept with the stretch of the transcript it ran: the
        Message API's ``start`` (DP wrappers start themselves), the legacy API's through
        ``Server.fit`` (``ServerApp(server_fn=...)``) or ``DefaultWorkflow`` (with the
        SecAgg+ workflow it ran, if any)."""
        real_start, real_fit, real_workflow = Strategy.start, Server.fit, DefaultWorkflow.__call__

        def kept(strategy: Any, run: Callable[[], Any], secagg: Any = None) -> Any:
            self.strategies.append(strategy)
            if isinstance(secagg, SecAggPlusWorkflow):
                self.secagg[id(strategy)] = secagg
            first = len(self.transcript.messages)
            try:
                return run()
            finally:
                self.spans.append((strategy, first, len(self.transcript.messages)))

        def start(strategy: Strategy, *args: Any, **kwargs: Any) -> Any:
            return kept(strategy, lambda: real_start(strategy, *args, **kwargs))

        def fit(server: Server, *args: Any, **kwargs: Any) -> Any:
            return kept(server.strategy, lambda: real_fit(server, *args, **kwargs))

        def workflow(flow: DefaultWorkflow, grid: Any, context: Any) -> Any:
            run = lambda: real_workflow(flow, grid, context)  # noqa: E731
            return kept(context.strategy, run, flow.fit_workflow)

        with (
            mock.patch.object(Strategy, "start", start),
            mock.patch.object(Server, "fit", fit),
            mock.patch.object(DefaultWorkflow, "__call__", workflow),
        ):
            yield

    def transcript_by_client(self) -> Transcript:
        """The transcript with nodes named as the clients they are."""
        self.transcript.rename(noted_clients(self.registry))
        return self.transcript

    def uploads(self) -> tuple[list[dict[int, State]], list[State]]:
        """(each round's uploads by client, each round's model the server sent), what
        ``audit_uploads`` reads with ``global_models``: the clients' train replies and the
        train requests, the rounds of each strategy your ``main`` ran one after another."""
        self.transcript_by_client()
        rounds: dict[tuple[int, int], dict[int, State]] = {}
        sent: dict[tuple[int, int], State] = {}
        for i, m in self._train(MODEL_WEIGHTS):
            if m.payload is None:
                continue
            step = self._step(i, m.round)
            if m.receiver == SERVER:
                rounds.setdefault(step, {}).setdefault(_client_index(m.sender), m.payload)
            else:
                sent.setdefault(step, m.payload)
        order = [step for step in rounds if step in sent]  # the transcript's order
        return [rounds[s] for s in order], [sent[s] for s in order]

    def _step(self, index: int, round_: int) -> tuple[int, int]:
        """The training step a message belongs to: (where the strategy that sent it started,
        or -1 outside every strategy, its round): rounds repeat when a main runs two."""
        first = max((a for _, a, b in self.spans if a <= index < b), default=-1)
        return first, round_

    def _train(
        self, kind: str, span: tuple[int, int] | None = None, action: str | None = None
    ) -> list[tuple[int, Any]]:
        """(index, message) of the train messages of ``kind`` (in ``span``, of ``action``,
        if given)."""
        first, end = span or (0, len(self.message_types))
        messages = self.transcript.messages
        return [
            (i, messages[i])
            for i in range(first, end)
            if is_training(self.message_types[i])
            and messages[i].kind == kind
            and action in (None, self.message_types[i])
        ]

    def audit_uploads(
        self, model: torch.nn.Module, data: Any, members: Any, **kwargs: Any
    ) -> ModelAudit:
        """``fgl_workbench.external.audit_uploads`` on what the server received."""
        from fgl_workbench.external.uploads import audit_uploads

        rounds, sent = self.uploads()
        return audit_uploads(rounds, model, data, members, global_models=sent, **kwargs)

    def train_weights(self, span: tuple[int, int]) -> list[list[Mapping[str, float] | None]]:
        """Each round's train replies' metrics in ``span`` (None where a reply's were not
        kept), what FedAvg weighted them by."""
        rounds: dict[int, list[Mapping[str, float] | None]] = {}
        for _, m in self._train(METRICS, span):
            if m.receiver == SERVER:
                rounds.setdefault(m.round, []).append(m.payload)
        return [rounds[r] for r in sorted(rounds)]

    def busiest(
        self,
        span: tuple[int, int] | None = None,
        kinds: tuple[str, ...] = (MODEL_WEIGHTS, MASKED_WEIGHTS),
        per_round: bool = False,
        action: str | None = None,
    ) -> int:
        """The most model uploads (of ``kinds``: in the clear or masked by SecAgg+) one client
        sent in train replies (in ``span``, to ``action``): the rounds it took part in;
        ``per_round``: the most uploads of one round instead."""
        counts: dict[Any, int] = {}
        for kind in kinds:
            for i, m in self._train(kind, span, action):
                if m.receiver == SERVER:
                    key = self._step(i, m.round) if per_round else m.sender
                    counts[key] = counts.get(key, 0) + 1
        return max(counts.values(), default=0)

    def ledger(self, num_clients: int) -> PrivacyLedger:
        """The ε your run's DP is worth, per adversary (module docstring): each wrapper's
        rounds counted from the train replies it received (the busiest client's), whatever
        payloads were kept."""
        # each train action's own handler (``train``, ``train.finetune``, ...) and its mods;
        # LocalDpMod bounds the run only where it sits on every action that uploaded
        actions = {t for t in self.message_types if is_training(t)} or {"train"}
        mods = {a: [m for app in self.client_apps for m in mods_of(app, a)] for a in actions}
        train_mods = list({id(m): m for ms in mods.values() for m in ms}.values())
        local = [m for m in train_mods if isinstance(m, LOCAL_DP_MODS)]
        events: list[Any] = []
        bare = sorted(
            a for a, ms in mods.items() if not any(isinstance(m, LOCAL_DP_MODS) for m in ms)
        )
        if local and bare:  # an action without it: its uploads are central DP's, or nobody's
            why = f"LocalDpMod is not on every train action ({', '.join(bare)} uploads without it)"
            events.append(NoGuarantee(why, EVERYONE))
            local = []
        # under LocalDpMod the server's part is post-processing of noised uploads: its
        # wrappers add nothing the ledger needs (composing them would only loosen the bound)
        for strategy, first, end in [] if local else self.spans:
            span = (first, end)
            secagg = self.secagg.get(id(strategy))
            masked = self.busiest(span, (MASKED_WEIGHTS,), per_round=True)
            if secagg is None and masked:
                why = "uploads masked by a SecAgg+ workflow the recorder could not read"
                events.append(NoGuarantee(why, EVERYONE))
            events += strategy_events(
                strategy,
                self.busiest(span),
                num_clients,
                self.train_weights(span),
                secagg,
                self.num_params(),
                masked,
            )
        for action, held in mods.items() if local else ():  # each action's uploads its mods
            for mod in [m for m in held if isinstance(m, LOCAL_DP_MODS)]:
                events += local_mod_events(mod, self.busiest(action=action))
        if not events:  # no DP ran: nothing is claimed
            return PrivacyLedger()
        events += self._unprotected(train_mods, mods if local else {})
        if any(m.kind == METRICS for m in self.transcript.messages):
            events.append(privacy.metrics_event(["metrics (losses, accuracies, counts)"]))
        return PrivacyLedger(tuple(events))

    def num_params(self) -> int:
        """The numbers of the first model the server sent (what SecAgg+ quantises)."""
        for _, m in self._train(MODEL_WEIGHTS):
            if m.sender == SERVER and m.payload is not None:
                return sum(int(v.numel()) for v in m.payload.values())
        return 0

    def _unprotected(
        self, train_mods: Sequence[Any], local: Mapping[str, Sequence[Any]]
    ) -> list[Any]:
        """What voids the DP that ran: model uploads outside every DP wrapper's rounds
        (your own grid calls, a strategy started without one) unless LocalDpMod noised them
        (for everyone); arrays clients sent in any other reply (un-noised, to the server);
        client-side clipping whose clients never clip (no ``fixedclipping_mod`` on the train
        handler, for everyone)."""
        covered = [(a, b) for s, a, b in self.spans if isinstance(s, DP_WRAPPERS)]
        voids: list[tuple[str, Scope]] = []
        uploads = [
            (i, m)
            for i, m in enumerate(self.transcript.messages)
            if m.receiver == SERVER and m.kind in (MODEL_WEIGHTS, MASKED_WEIGHTS)
        ]
        outside = [
            i
            for i, _ in uploads
            if is_training(self.message_types[i]) and not any(a <= i < b for a, b in covered)
        ]
        if outside and not local:  # masked or not: the rounds released an un-noised mean
            voids.append((f"{len(outside)} uploads outside every DP wrapper's rounds", EVERYONE))
        others = sorted(
            {t for t in (self.message_types[i] for i, _ in uploads) if not is_training(t)}
        )
        if others:
            # Flower's legacy server takes its initial model from one client's get_parameters
            # reply and sends it to every client: what reaches the others reaches everyone
            seen = ("server",) if "get_parameters" not in others else EVERYONE.adversaries
            why = f"clients sent arrays in {', '.join(others)} replies, un-noised"
            voids.append((why, Scope("client", privacy.ZERO_OUT, seen)))
        for s in self.strategies:
            clipping = s.__class__ in CLIENT_SIDE_FIXED
            if clipping and not any(m in CLIPPING_MODS for m in train_mods):
                why = f"{type(s).__name__} without fixedclipping_mod on the clients: nothing clips"
                voids.append((why, EVERYONE))
        voids += [(why, EVERYONE) for why in self._checked_uploads(local)]
        return [NoGuarantee(why, scope) for why, scope in voids]

    def _checked_uploads(self, local: Mapping[str, Sequence[Any]]) -> list[str]:
        """What the uploads contradict: without LocalDpMod, under client-side clipping an
        update longer than the clip (a mod that scales it after clipping; LocalDpMod's noise
        lengthens a clipped update legitimately, and its own guarantee then bounds the run);
        under LocalDpMod, noise other than it states (``noise_checks``). A masked upload is
        checked as its node handed it to SecAgg+; rounds whose payloads were not kept are
        not checked. ``local``: each train action's mods, where LocalDpMod bounds the run (it
        sits on every action)."""
        uploads, unkept = self._uploaded_updates()
        problems: set[str] = set()
        clipped = [
            (s.clipping_norm, a, b) for s, a, b in self.spans if s.__class__ in CLIENT_SIDE_FIXED
        ]
        if (local or clipped) and unkept:
            problems.add(
                f"{unkept} uploads masked by SecAgg+ without the vector their node masked "
                "(SecAgg+ other than Flower's secaggplus_mod, or a node outside the recorder): "
                "nothing shows the clients' DP mods acted on them"
            )
        for i, update in uploads if clipped and not local else ():
            length = float(torch.cat([v.reshape(-1) for v in update.values()]).norm())
            for clip, a, b in clipped:
                if a <= i < b and length > clip * (1 + 1e-4):
                    problems.add(f"uploads longer than the clip {clip:g}: clipping did not hold")
        for action, held in local.items():
            own = [u for i, u in uploads if self.message_types[i] == action]
            for mod in [m for m in held if isinstance(m, LOCAL_DP_MODS)]:
                std = privacy.local_dp_mod_std(mod.sensitivity, mod.epsilon, mod.delta)
                problems.update(noise_problems(own, std, mod.clipping_norm))
        return sorted(problems)

    def _uploaded_updates(self) -> tuple[list[tuple[int, dict[str, torch.Tensor]]], int]:
        """((message index, upload − the model sent to that client at that step, array by
        array) for every kept train upload, in the clear or as its node handed it to SecAgg+;
        the number of masked uploads whose unmasked vector was not kept, or not of the model
        sent)."""
        self.transcript_by_client()
        names = noted_clients(self.registry)
        sent: dict[tuple[tuple[int, int], str], State] = {}
        for i, m in self._train(MODEL_WEIGHTS):
            if m.sender == SERVER and m.payload is not None:
                sent.setdefault((self._step(i, m.round), m.receiver), m.payload)
        kept = {
            names.get(node_party(node), node_party(node)): iter(vectors)
            for node, vectors in kept_uploads(self.premask).items()
        }
        uploads: list[tuple[int, dict[str, torch.Tensor]]] = []
        unkept = 0
        for i, m in sorted(self._train(MODEL_WEIGHTS) + self._train(MASKED_WEIGHTS)):
            if m.receiver != SERVER:
                continue
            reference = sent.get((self._step(i, m.round), m.sender))
            payload = m.payload
            if m.kind == MASKED_WEIGHTS:  # this node's next kept vector, of this round
                round_, arrays = next(kept.get(m.sender, iter(())), (None, []))
                if round_ != m.round or reference is None or len(arrays) != len(reference):
                    unkept += 1
                    continue
                payload = {k: torch.as_tensor(a) for k, a in zip(reference, arrays, strict=True)}
            if payload is None or reference is None:
                continue
            if any(k not in payload or payload[k].shape != v.shape for k, v in reference.items()):
                unkept += m.kind == MASKED_WEIGHTS
                continue  # not the model it was sent: a shape no noise test applies to
            uploads.append((i, _update(payload, reference)))
        return uploads, unkept

    def close(self) -> None:
        """Delete the folder the nodes noted their partitions in (also done when the
        recorder is garbage-collected or the interpreter exits)."""
        self._cleanup()


EVERYONE = Scope("client", privacy.ZERO_OUT, ("clients", "querier", "server"))


def _update(local: State, reference: State) -> dict[str, torch.Tensor]:
    """local − reference, array by array, over the floating-point arrays."""
    return {
        k: local[k].double() - v.double() for k, v in reference.items() if v.is_floating_point()
    }


def is_training(message_type: str) -> bool:
    """A train message of any action (``train``, ``train.<action>``): its replies carry the
    clients' models."""
    return message_type == "train" or message_type.startswith("train.")


def _client_index(party: str) -> int:
    """The client a transcript party names; a node that never said its partition is an
    error, not a silent node id."""
    kind, _, index = party.partition(":")
    if kind != "client":
        raise ConfigError(
            f"client_app: node {index} never said which partition it is (its "
            "node_config has no 'partition-id'); start your SuperNodes with "
            '--node-config "partition-id=K num-partitions=N"'
        )
    return int(index)


def strategy_events(
    strategy: Any,
    rounds: int,
    num_clients: int,
    replies: Sequence[Sequence[Mapping[str, float]]] = (),
    secagg: SecAggPlusWorkflow | None = None,
    num_params: int = 0,
    masked_per_round: int = 0,
) -> list[Any]:
    """A strategy's events, stated for removing a client with its weight (a user's clients
    weigh by what their data sets: ``privacy.central_events``): Flower's fixed-clipping
    wrappers of either API, exactly as Flower ships them, around FedAvg
    (``fgl_workbench.targets.flower.privacy``); under the legacy API's SecAgg+ workflow
    (``secagg``), client-side clipping with SecAgg+'s quantisation in the sensitivity over
    the model's ``num_params`` numbers. Everything else that claims DP leaves ∞ with the
    reason: adaptive clipping (``privacy.ADAPTIVE``), a subclass of a wrapper (its code is
    not Flower's), a wrapper around another aggregate (its sensitivity is not FedAvg's), a
    noise multiplier of 0, server-side clipping under SecAgg+, a SecAgg+ sum that can wrap
    (``masked_per_round`` uploads of ``quantization_range`` against ``modulus_range``),
    Flower's deprecated DPFedAvg wrappers. ``replies``: each round's train replies' metrics,
    whose weights set how far one client moves the mean."""
    if isinstance(strategy, DEPRECATED_DP):
        why = f"{type(strategy).__name__}: Flower's deprecated DP wrapper, not accounted here"
        return [NoGuarantee(why, EVERYONE)]
    if not isinstance(strategy, DP_WRAPPERS):
        return []
    name, inner = type(strategy).__name__, strategy.strategy
    old = isinstance(strategy, LEGACY_DP_WRAPPERS)
    key = "num_examples" if old else inner.weighted_by_key
    weights = quantised(replies, key, secagg) if secagg is not None else replies
    share = worst_share(weights, key, strategy.num_sampled_clients)
    side = "client" if "ClientSide" in name else "server"
    why = None
    if type(strategy) not in DP_WRAPPERS:
        why = f"{name} subclasses Flower's {type(strategy).__mro__[1].__name__}: not its code"
    elif _replaced(strategy) or _replaced(inner):
        replaced = ", ".join(_replaced(strategy) + _replaced(inner))
        why = f"{name}: methods replaced on the instance ({replaced})"
    elif "Adaptive" in name:
        why = f"{name}: {privacy.ADAPTIVE}"
    elif not _fedavg_aggregate(inner, old):
        why = f"{name} around {type(inner).__name__}: its aggregate's sensitivity is not FedAvg's"
    elif strategy.noise_multiplier <= 0:
        why = f"{name} with noise multiplier {strategy.noise_multiplier}: no noise"
    elif secagg is not None and side == "server":
        why = f"{name} under SecAgg+: the server holds the round's sum only and clips that"
    elif secagg is not None and num_params <= 0:
        why = f"{name} under SecAgg+: no model was kept to bound its rounding by"
    elif share is None:
        why = f"{name}: the train replies' weights ({key}) were not all kept"
    elif secagg is not None and _heaviest(replies, key) > secagg.max_weight:
        why = f"{name} under SecAgg+: a weight above its max_weight {secagg.max_weight:g}"
    elif (
        secagg is not None and masked_per_round * secagg.quantization_range >= secagg.modulus_range
    ):
        why = (
            f"{name} under SecAgg+: {masked_per_round} uploads of quantization_range "
            f"{secagg.quantization_range} can wrap its modulus_range {secagg.modulus_range}"
        )
    if why is not None:
        return [NoGuarantee(why, EVERYONE)]
    m = strategy.num_sampled_clients
    config = DPFedAvgConfig(
        clip=strategy.clipping_norm, noise_multiplier=strategy.noise_multiplier * share
    )
    rounding = None
    if secagg is not None:  # at the lightest round's heaviest weight: the coarsest quantum
        lightest = min(_heaviest([r], key) for r in weights) if weights else 1.0
        rounding = privacy.secagg_rounding(
            secagg.clipping_range, secagg.quantization_range, lightest, num_params
        )
    events: list[Any] = list(
        privacy.central_events(config, rounds, m, num_clients, side, True, rounding)
    )
    if not _fedavg_configure(inner, old):
        why = f"{type(inner).__name__}'s own configure step: what it sends clients is its choice"
        events.append(NoGuarantee(why, Scope("client", privacy.ZERO_OUT, ("clients",))))
    return events


def _fedavg_aggregate(inner: Any, old: bool) -> bool:
    if old:
        return type(inner).aggregate_fit is legacy.FedAvg.aggregate_fit
    return type(inner).aggregate_train is FedAvg.aggregate_train


def _fedavg_configure(inner: Any, old: bool) -> bool:
    if old:
        return type(inner).configure_fit in (
            legacy.FedAvg.configure_fit,
            legacy.FedProx.configure_fit,
        )
    return type(inner).configure_train in (FedAvg.configure_train, FedProx.configure_train)


def _heaviest(replies: Sequence[Sequence[Mapping[str, float] | None]], key: str) -> float:
    """The largest weight any reply carried (0 where none did)."""
    weights = [r.get(key) for round_ in replies for r in round_ if r is not None]
    return max((float(w) for w in weights if isinstance(w, int | float)), default=0.0)


def quantised(
    replies: Sequence[Sequence[Mapping[str, float] | None]], key: str, secagg: SecAggPlusWorkflow
) -> list[list[Mapping[str, float] | None]]:
    """The replies' weights as SecAgg+ applies them: round(w/max_weight · range)/range, the
    fraction of max_weight each masked upload is scaled by."""
    r = secagg.quantization_range
    return [
        [
            {key: round(float(x[key]) / secagg.max_weight * r) / r}
            if x is not None and isinstance(x.get(key), int | float)
            else x
            for x in round_
        ]
        for round_ in replies
    ]


def _replaced(strategy: Any) -> list[str]:
    """Methods of ``strategy``'s class replaced on the instance itself."""
    return [n for n, v in vars(strategy).items() if callable(v) and hasattr(type(strategy), n)]


def worst_share(
    replies: Sequence[Sequence[Mapping[str, float] | None]], key: str, m: int
) -> float | None:
    """How much of σ survives the weighting, at the worst round: the wrappers' noise is
    σ·C/m, while FedAvg's weighted mean lets one client move it by C·|w|_max/Σw (C/m only
    with m equal weights), so the effective multiplier is σ·Σw/(m·|w|_max) (1 for equal
    weights and every sampled client replying). None where a reply's weight is missing or
    the weights do not sum to a positive total: nothing bounds the move."""
    shares = [1.0]
    for round_ in replies:
        weights = [r.get(key) if r is not None else None for r in round_]
        if any(not isinstance(w, int | float) for w in weights):
            return None
        total, top = sum(weights), max(abs(w) for w in weights)
        if total <= 0:
            return None
        shares.append(total / (m * top))
    return min(shares)


def local_mod_events(mod: LocalDpMod | LegacyLocalDpMod, uploads: int) -> list[Any]:
    """LocalDpMod's noise at its own (ε, δ) and sensitivity, accounted at 2·clip (∞ where
    its sensitivity argument, hence its noise, is 0, or the mod subclasses Flower's: its
    code is not Flower's)."""
    if type(mod) not in LOCAL_DP_MODS:
        why = f"{type(mod).__name__} subclasses Flower's LocalDpMod: not its code"
        return [NoGuarantee(why, EVERYONE)]
    std = privacy.local_dp_mod_std(mod.sensitivity, mod.epsilon, mod.delta)
    if std <= 0:
        return [NoGuarantee("LocalDpMod with sensitivity 0 adds no noise", EVERYONE)]
    config = DPFedAvgConfig(
        clip=mod.clipping_norm, noise_multiplier=std / mod.clipping_norm, mode="local"
    )
    return list(privacy.local_events(config, uploads))


def mods_of(app: ClientApp, category: str | None = None) -> list[Any]:
    """The DP mods a ClientApp runs (app-wide and per handler), found in its handlers'
    chains: every handler's, or only those of the handler a message of type ``category``
    reaches (``"train"``: the default train handler, where a strategy's train messages go;
    ``"train.finetune"``: that action's)."""
    handler = category if category is None or "." in category else f"{category}.default"
    found: list[Any] = list(getattr(app, "_mods", []))
    seen: set[int] = set()

    def is_mod(value: Any) -> bool:
        return isinstance(value, LOCAL_DP_MODS) or any(value is m for m in CLIPPING_MODS)

    def walk(fn: Any) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            value = cell.cell_contents
            if is_mod(value):
                found.append(value)
            elif callable(value):
                walk(value)
            elif isinstance(value, list | tuple):
                found.extend(v for v in value if is_mod(v))

    for name, fn in getattr(app, "_registered_funcs", {}).items():
        if handler is None or name == handler:
            walk(fn)
    return list({id(m): m for m in found}.values())


__all__ = ["FlowerRecorder", "mods_of"]
