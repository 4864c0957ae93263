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

import math
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
from scipy.stats import chi2, kstest

from fgl_workbench.accountants import NoGuarantee, PrivacyLedger, Scope
from fgl_workbench.defenses.dp_fedavg import DPFedAvgConfig, update_vector
from fgl_workbench.errors import ConfigError
from fgl_workbench.external.model import ModelAudit
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
        train requests."""
        self.transcript_by_client()
        rounds: dict[int, dict[int, State]] = {}
        sent: dict[int, State] = {}
        for _, m in self._train(MODEL_WEIGHTS):
            if m.payload is None:
                continue
            if m.receiver == SERVER:
                rounds.setdefault(m.round, {}).setdefault(_client_index(m.sender), m.payload)
            else:
                sent.setdefault(m.round, m.payload)
        order = sorted(rounds)
        return [rounds[r] for r in order], [sent[r] for r in order]

    def _train(self, kind: str, span: tuple[int, int] | None = None) -> list[tuple[int, Any]]:
        """(index, message) of the train messages of ``kind`` (in ``span``, if given)."""
        first, end = span or (0, len(self.message_types))
        messages = self.transcript.messages
        return [
            (i, messages[i])
            for i in range(first, end)
            if self.message_types[i] == "train" and messages[i].kind == kind
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

    def busiest(self, span: tuple[int, int] | None = None) -> int:
        """The most model uploads one client sent in train replies (in ``span``), in the clear
        or masked by SecAgg+: the rounds it took part in."""
        counts: dict[str, int] = {}
        for kind in (MODEL_WEIGHTS, MASKED_WEIGHTS):
            for _, m in self._train(kind, span):
                if m.receiver == SERVER:
                    counts[m.sender] = counts.get(m.sender, 0) + 1
        return max(counts.values(), default=0)

    def ledger(self, num_clients: int) -> PrivacyLedger:
        """The ε your run's DP is worth, per adversary (module docstring): each wrapper's
        rounds counted from the train replies it received (the busiest client's), whatever
        payloads were kept."""
        train_mods = [m for app in self.client_apps for m in mods_of(app, "train")]
        local = [m for m in train_mods if isinstance(m, LOCAL_DP_MODS)]
        events: list[Any] = []
        for strategy, first, end in self.spans:  # beside LocalDpMod's, stated for replace-one
            span = (first, end)
            weights = self.train_weights(span)
            rounds = self.busiest(span)
            secagg = self.secagg.get(id(strategy))
            events += strategy_events(
                strategy, rounds, num_clients, weights, bool(local), secagg, self.num_params()
            )
        for mod in local:
            events += local_mod_events(mod, self.busiest())
        if not events:  # no DP ran: nothing is claimed
            return PrivacyLedger()
        events += self._unprotected(train_mods, bool(local))
        if any(m.kind == METRICS for m in self.transcript.messages):
            events.append(privacy.metrics_event(["metrics (losses, accuracies, counts)"]))
        return PrivacyLedger(tuple(events))

    def num_params(self) -> int:
        """The numbers of the first model the server sent (what SecAgg+ quantises)."""
        for _, m in self._train(MODEL_WEIGHTS):
            if m.sender == SERVER and m.payload is not None:
                return sum(int(v.numel()) for v in m.payload.values())
        return 0

    def _unprotected(self, train_mods: Sequence[Any], local: bool) -> list[Any]:
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
            if m.receiver == SERVER and m.kind == MODEL_WEIGHTS
        ]
        outside = [
            i
            for i, _ in uploads
            if self.message_types[i] == "train" and not any(a <= i < b for a, b in covered)
        ]
        if outside and not local:
            voids.append((f"{len(outside)} uploads outside every DP wrapper's rounds", EVERYONE))
        others = sorted({self.message_types[i] for i, _ in uploads} - {"train"})
        if others:
            why = f"clients sent arrays in {', '.join(others)} replies, un-noised"
            voids.append((why, Scope("client", privacy.ZERO_OUT, ("server",))))
        for s in self.strategies:
            clipping = s.__class__ in CLIENT_SIDE_FIXED
            if clipping and not any(m in CLIPPING_MODS for m in train_mods):
                why = f"{type(s).__name__} without fixedclipping_mod on the clients: nothing clips"
                voids.append((why, EVERYONE))
        voids += [(why, EVERYONE) for why in self._checked_uploads(train_mods)]
        return [NoGuarantee(why, scope) for why, scope in voids]

    def _checked_uploads(self, train_mods: Sequence[Any]) -> list[str]:
        """What the uploads contradict: under client-side clipping an update longer than the
        clip (a mod that scales it after clipping); under LocalDpMod noise shorter than it
        claims, or shared between two clients of a round (``short_noise``,
        ``shared_noise``). A masked upload is checked as its node handed it to SecAgg+;
        rounds whose payloads were not kept are not checked."""
        local = [m for m in train_mods if isinstance(m, LOCAL_DP_MODS)]
        clipped = [
            (s.clipping_norm, a, b) for s, a, b in self.spans if s.__class__ in CLIENT_SIDE_FIXED
        ]
        uploads, unkept = self._uploaded_updates()
        problems: set[str] = set()
        if local and unkept:
            problems.add(
                f"{unkept} uploads masked by SecAgg+ without the vector their node masked "
                "(SecAgg+ other than Flower's secaggplus_mod, or a node outside the recorder): "
                "nothing shows LocalDpMod acted on them"
            )
        rounds: dict[int, list[torch.Tensor]] = {}
        for i, round_, update in uploads:
            rounds.setdefault(round_, []).append(update)
            for clip, a, b in clipped:
                if a <= i < b and float(update.norm()) > clip * (1 + 1e-4):
                    problems.add(f"uploads longer than the clip {clip:g}: clipping did not hold")
        updates = [u for r in rounds.values() for u in r]
        for mod in local:
            std = privacy.local_dp_mod_std(mod.sensitivity, mod.epsilon, mod.delta)
            if short_noise(updates, std, mod.clipping_norm):
                problems.add("uploads carry less noise than LocalDpMod's: it did not run as stated")
            if misshapen_noise(updates, std, mod.clipping_norm):
                problems.add("uploads' entries are not the i.i.d. Gaussian noise LocalDpMod states")
            if any(shared_noise(r, std, mod.clipping_norm) for r in rounds.values()):
                problems.add("two uploads of a round share their noise: the server cancels it")
        return sorted(problems)

    def _uploaded_updates(self) -> tuple[list[tuple[int, int, torch.Tensor]], int]:
        """((message index, round, upload − the model sent to that client that round) for
        every kept train upload, in the clear or as its node handed it to SecAgg+; the
        number of masked uploads whose unmasked vector was not kept)."""
        self.transcript_by_client()
        names = noted_clients(self.registry)
        sent: dict[tuple[int, str], State] = {}
        for _, m in self._train(MODEL_WEIGHTS):
            if m.sender == SERVER and m.payload is not None:
                sent.setdefault((m.round, m.receiver), m.payload)
        kept = {
            (round_, names.get(node_party(node), node_party(node))): arrays
            for (round_, node), arrays in kept_uploads(self.premask).items()
        }
        uploads: list[tuple[int, int, torch.Tensor]] = []
        unkept = 0
        for i, m in self._train(MODEL_WEIGHTS) + self._train(MASKED_WEIGHTS):
            if m.receiver != SERVER:
                continue
            reference = sent.get((m.round, m.sender))
            payload = m.payload
            if m.kind == MASKED_WEIGHTS:
                arrays = kept.get((m.round, m.sender))
                if arrays is None or reference is None or len(arrays) != len(reference):
                    unkept += 1
                    continue
                payload = {k: torch.as_tensor(a) for k, a in zip(reference, arrays, strict=True)}
            if payload is not None and reference is not None:
                uploads.append((i, m.round, update_vector(payload, reference)))
        return uploads, unkept

    def close(self) -> None:
        """Delete the folder the nodes noted their partitions in (also done when the
        recorder is garbage-collected or the interpreter exits)."""
        self._cleanup()


# an upload's noise is called too short (or shared) at this p-value, split over the uploads
# (pairs) tested: a correct LocalDpMod is flagged with probability below it
NOISE_TEST_P = 1e-6


def short_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether an update ``u + z`` (‖u‖ ≤ ``clip``, z the noise) is too short for noise of
    ``std`` per entry: ‖z‖ ≤ ‖u + z‖ + clip, and ‖z‖²/std² is χ² with d degrees of freedom
    under the claim, so a noise 10 % short is seen in a model of 10⁵ entries."""
    if not updates:
        return False
    # the shortest update decides: its noise is the least any upload's could be
    shortest = min(((float(u.norm()) + clip) / std) ** 2 for u in updates)
    return bool(chi2.cdf(shortest, updates[0].numel()) < NOISE_TEST_P / len(updates))


def shared_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether two updates of one round are closer than independent noise allows, as they
    are or one negated: the difference (and the sum) of two noises of ``std`` is Gaussian of
    std·√2, and ‖z_i ∓ z_j‖ ≤ ‖Δ_i ∓ Δ_j‖ + 2·clip (the same draw in every client, a
    generator seeded by the round; or one draw added by one client and subtracted by
    another)."""
    if len(updates) < 2:
        return False
    x = torch.stack([u.double() for u in updates])
    squares = (x * x).sum(1)
    products = x @ x.T
    k = len(updates)
    apart = ~torch.eye(k, dtype=torch.bool)
    closest = min(
        float((squares[:, None] + squares[None, :] - sign * 2 * products)[apart].min())
        for sign in (1, -1)
    )
    tests = k * (k - 1)  # each pair, difference and sum
    statistic = ((max(closest, 0.0) ** 0.5 + 2 * clip) / (std * 2**0.5)) ** 2
    return bool(chi2.cdf(statistic, x.shape[1]) < NOISE_TEST_P / tests)


def misshapen_noise(updates: Sequence[torch.Tensor], std: float, clip: float) -> bool:
    """Whether an update's entries are too far from i.i.d. Gaussian noise of ``std`` (noise
    on a few entries at the stated length, a clean step as long as the noise), by their
    Kolmogorov–Smirnov distance to N(0, 1) after dividing by ``std``. Under the claim that
    distance is at most the noise's own, below √(ln(2/p)/2d) but with probability p
    (Massart's DKW), plus what ‖u‖ ≤ ``clip`` can move: at most φ(0)·t + ‖u/std‖²/(t²d)
    for every t (entries moved more than t are at most ‖u/std‖²/t² in number)."""
    if not updates:
        return False
    d = updates[0].numel()
    p = NOISE_TEST_P / len(updates)
    b = (clip / std) ** 2 / d
    t = (2 * b / DENSITY_AT_0) ** (1 / 3)  # where φ(0)·t + b/t² is least
    bound = (math.log(2 / p) / (2 * d)) ** 0.5 + DENSITY_AT_0 * t + b / t**2
    worst = max(kstest(u.double().numpy() / std, "norm").statistic for u in updates)
    return bool(worst > bound)


DENSITY_AT_0 = 1 / math.sqrt(2 * math.pi)
EVERYONE = Scope("client", privacy.ZERO_OUT, ("clients", "querier", "server"))


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
    replace_one: bool = False,
    secagg: SecAggPlusWorkflow | None = None,
    num_params: int = 0,
) -> list[Any]:
    """A strategy's events (``replace_one``: stated for replacing one client's data, as
    ``privacy.central_events`` says): Flower's fixed-clipping wrappers of either API, exactly
    as Flower ships them, around FedAvg (``fgl_workbench.targets.flower.privacy``); under the
    legacy API's SecAgg+ workflow (``secagg``), client-side clipping with SecAgg+'s
    quantisation in the sensitivity over the model's ``num_params`` numbers. Everything else
    that claims DP leaves ∞ with the reason: adaptive clipping (``privacy.ADAPTIVE``), a
    subclass of a wrapper (its code is not Flower's), a wrapper around another aggregate (its
    sensitivity is not FedAvg's), a noise multiplier of 0, server-side clipping under SecAgg+,
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
        privacy.central_events(config, rounds, m, num_clients, side, replace_one, rounding)
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
    its sensitivity argument, hence its noise, is 0)."""
    std = privacy.local_dp_mod_std(mod.sensitivity, mod.epsilon, mod.delta)
    if std <= 0:
        return [NoGuarantee("LocalDpMod with sensitivity 0 adds no noise", EVERYONE)]
    config = DPFedAvgConfig(
        clip=mod.clipping_norm, noise_multiplier=std / mod.clipping_norm, mode="local"
    )
    return list(privacy.local_events(config, uploads))


def mods_of(app: ClientApp, category: str | None = None) -> list[Any]:
    """The DP mods a ClientApp runs (app-wide and per handler), found in its handlers'
    chains: every handler's, or only ``category``'s default handler (``"train"``: where a
    strategy's train messages go, what acts on the uploads)."""
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
        if category is None or name == f"{category}.default":  # what a strategy's messages reach
            walk(fn)
    return list({id(m): m for m in found}.values())


__all__ = ["FlowerRecorder", "mods_of"]
