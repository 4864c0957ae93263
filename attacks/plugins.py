"""Third-party attacks are described, never imported, in the workbench's own process.

A plug-in attack's module could run code when it is imported: in the runner, unfenced, that
code could read the results folder and stash the ground truth where the plug-in's fenced
worker later finds it. So the registry holds a ``PluginAttack`` in its place, built from what
a fenced describer process reports in JSON (name, family, threat, its config's adversaries
and field names), and the plug-in's parameters are validated by its own ``Config`` in that
process too. The plug-in's code runs only in fenced processes: this describer and the worker
that runs the attack (``fgl_workbench.running.isolated``). Nothing either sends back is
unpickled here: JSON, capped, checked by typed models.

Where the kernel gives no fence (``fgl_workbench.sandbox``), plug-ins are described and run
only when the user trusts them (``--trust-plugins``, ``trusting``)."""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticCustomError

from fgl_workbench import sandbox
from fgl_workbench.adversary.exchanged import Combine
from fgl_workbench.attacks.base import Family, ThreatModel, attack_plugin
from fgl_workbench.errors import ConfigError
from fgl_workbench.registry import PluginError, resolve

TRUSTED = "trusted without sandbox"
GROUP = "fgl_workbench.attacks"
# what a plug-in's processes keep of the runner's environment (no tokens, no paths it set),
# besides the CUDA_* settings and the names the user lists in PLUGIN_ENVIRONMENT
PLUGIN_ENVIRONMENT = "FGLWB_PLUGIN_ENV"
KEPT_ENVIRONMENT = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
REPLY_BYTES = 1 << 20  # a longer answer from the describer is refused unread
ANSWER_SECONDS = 300.0  # importing a plug-in (and torch with it) may be slow, not endless
TEXT = 2000  # characters of a threat model's sentence
FIELD_NAME = r"^[A-Za-z][A-Za-z0-9_]{0,99}$"
_TRUSTING: ContextVar[bool] = ContextVar("trusting_plugins", default=False)


@contextmanager
def trusting(trusted: bool) -> Iterator[None]:
    """While the user's ``--trust-plugins`` (or suite ``trust_plugins``) holds: plug-ins may
    be described unfenced where the kernel gives no fence."""
    token = _TRUSTING.set(trusted or _TRUSTING.get())
    try:
        yield
    finally:
        _TRUSTING.reset(token)


def fence(trusted: bool) -> str:
    """How a plug-in's code runs here, as its row records it: the kernel's fence, or trusted
    without one. Refused (one line) where there is no fence and the user did not say
    ``--trust-plugins``."""
    mechanism = sandbox.mechanism()
    if mechanism is not None:
        return f"sandboxed ({mechanism})"
    if trusted:
        return TRUSTED
    raise ConfigError(
        "plug-in attacks: this kernel cannot sandbox them (both fences need user namespaces) "
        f"or {sandbox.SANDBOX_VARIABLE}=none says not to; pass "
        "--trust-plugins (suite: trust_plugins: true) to run them unfenced"
    )


def kept_environment() -> dict[str, str]:
    """The runner's environment as a plug-in's process gets it."""
    listed = {n.strip() for n in os.environ.get(PLUGIN_ENVIRONMENT, "").split(",") if n.strip()}
    keep = set(KEPT_ENVIRONMENT) | listed
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("CUDA")}


def readable_for(references: list[str]) -> list[Path]:
    """What a fenced plug-in process reads: Python, the workbench, the plug-ins' own code."""
    plugins = sandbox.plugin_paths(GROUP, references) + sandbox.plugin_folders()
    return sandbox.readable_paths() + plugins


def imported(reference: str) -> Any:
    """The attack ``reference`` (``module:Attribute``) names, imported and checked against
    the interface: only ever called in a plug-in's fenced process."""
    return attack_plugin(resolve(reference), f"attack '{reference}'")


Party = Literal["querier", "server", "client"]


class RunnerFields(BaseModel):
    """The parameters the runner itself reads from an attack's config (to cut its view, its
    candidates and its challenge), each with the type and bounds the built-in attacks give
    it. A plug-in's config may declare them; the values its describer returns are checked
    here, never taken on trust."""

    model_config = ConfigDict(strict=True, extra="ignore")
    adversary: Party | None = None
    client: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    hops: Annotated[int, Field(ge=0, le=5)] | None = None
    source: Literal["served", "release", "exchanged"] | None = None
    combine: Combine | None = None
    structure: Literal["none", "known"] | None = None
    known_edges: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    step: Annotated[float, Field(gt=0.0, le=10.0, allow_inf_nan=False)] | None = None
    trials: Annotated[int, Field(ge=40, le=1_000_000)] | None = None
    attribute: Annotated[str, Field(max_length=200)] | None = None
    signal: Annotated[str, Field(max_length=100)] | None = None


REQUIRED = set(RunnerFields.model_fields) - {"step", "signal"}  # read without a None check


class PluginParams(BaseModel):
    """A plug-in attack's parameters, checked by its own ``Config`` in the describer: the
    fields it declares are listed here (the adversary with its choices) and hold the values
    the plug-in's model gave them."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __plugin_reference__: ClassVar[str]

    def __init__(self, **params: Any) -> None:
        declared = set(type(self).model_fields)
        super().__init__(**_DESCRIBER.validated(self.__plugin_reference__, params, declared))


@dataclass(frozen=True)
class PluginAttack:
    """A third-party attack as the registry holds it in the runner: what its describer said
    of it. It never runs here; ``fgl_workbench.running.isolated`` imports ``reference`` in a
    fenced worker and runs it there."""

    name: str
    family: Family
    threat: ThreatModel | None
    reference: str
    Config: type[PluginParams]


class _Threat(BaseModel):
    sees: str = Field(max_length=TEXT)
    knows: str = Field(max_length=TEXT)


class _Description(BaseModel):
    """What the describer may say of a plug-in; anything else is refused."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    family: Family
    threat: _Threat | None
    adversaries: list[Party] | None = Field(max_length=3)  # None: no adversary field
    adversary_default: Party | None
    fields: list[Annotated[str, Field(pattern=FIELD_NAME)]] = Field(max_length=1000)


class _Problem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(max_length=100)
    loc: list[str | int] = Field(max_length=32)
    msg: str = Field(max_length=TEXT)


class _Checked(BaseModel):
    """The describer's answer on parameters: the plug-in's values, or its config's errors."""

    model_config = ConfigDict(extra="forbid")
    params: dict[str, Any] | None = None
    problems: list[_Problem] | None = Field(None, max_length=1000)


def described(reference: str, where: str) -> PluginAttack:
    """The stand-in for the plug-in attack ``reference``, described by a fenced process
    (``where`` names it in errors)."""
    answer = _DESCRIBER.ask({"describe": reference}, reference)
    try:
        found = _Description.model_validate(answer)
    except ValidationError as exc:
        raise _out_of_form(where, exc) from None
    taken = [f for f in found.fields if not _plain_name(f)]
    if taken:
        raise PluginError(f"{where}: its config's field '{taken[0]}' shadows pydantic's own")
    fields: dict[str, Any] = {f: (Any, None) for f in found.fields if f != "adversary"}
    if found.adversaries is not None:
        choices = Literal[tuple(found.adversaries)]  # type: ignore[valid-type]
        fields["adversary"] = (choices, found.adversary_default or found.adversaries[0])
    config = create_model(f"{found.name}Params", __base__=PluginParams, **fields)
    config.__plugin_reference__ = reference
    threat = None if found.threat is None else ThreatModel(found.threat.sees, found.threat.knows)
    return PluginAttack(found.name, found.family, threat, reference, config)


class _Describer:
    """One fenced process per runner process that imports plug-in attacks and answers
    questions about them in JSON; restarted, with more code readable, when a plug-in lives
    where it cannot read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._readable: frozenset[Path] = frozenset()
        self._how: str | None = None
        self._scratch: Path | None = None
        self._checked: dict[tuple[str, str], dict[str, Any]] = {}
        atexit.register(self.close)

    def ask(self, question: dict[str, Any], reference: str) -> dict[str, Any]:
        with self._lock:
            self._start_for(reference)
            assert self._conn is not None
            self._conn.send_bytes(json.dumps(question).encode())
            try:
                answer = json.loads(self._received(reference))
            except (EOFError, OSError, ValueError, RecursionError) as exc:
                self.close()
                raise PluginError(f"attack '{reference}': its describer failed ({exc})") from None
        if not isinstance(answer, dict):
            raise PluginError(f"attack '{reference}': its describer answered out of form")
        if "failed" in answer:
            raise PluginError(str(answer["failed"])[:TEXT])
        return answer

    def _received(self, reference: str) -> bytes:
        """The describer's next answer, read in a thread so that one which sends a length
        and then stalls is given up on too (``recv_bytes`` alone would wait for good)."""
        conn, got = self._conn, []
        assert conn is not None

        def receive() -> None:
            try:
                got.append(conn.recv_bytes(REPLY_BYTES))
            except (EOFError, OSError) as exc:
                got.append(exc)

        reader = threading.Thread(target=receive, daemon=True)
        reader.start()
        reader.join(ANSWER_SECONDS)
        if reader.is_alive() or not got:
            self.close()  # its end of the pipe closes: the reading thread ends
            raise PluginError(f"attack '{reference}': no answer in {ANSWER_SECONDS:.0f} s")
        if isinstance(got[0], Exception):
            raise got[0]
        return got[0]

    def validated(
        self, reference: str, params: dict[str, Any], declared: set[str]
    ) -> dict[str, Any]:
        """``params`` as the plug-in's ``Config`` takes them; its errors as a
        ``ValidationError`` naming each field, the inputs being ours. Refused where the
        plug-in could run neither fenced nor trusted, answered before or not."""
        fence(_TRUSTING.get())
        try:
            key = (reference, json.dumps(params, sort_keys=True, allow_nan=False))
        except (TypeError, ValueError):
            problem = _Problem(type="json", loc=[], msg=NOT_JSON)
            raise _invalid(reference, [problem], params) from None
        if key not in self._checked:
            answer = self.ask({"validate": reference, "params": params}, reference)
            try:
                checked = _Checked.model_validate(answer)
            except ValidationError as exc:
                raise _out_of_form(f"attack '{reference}'", exc) from None
            if checked.problems:
                raise _invalid(reference, checked.problems, params)
            values = checked.params or {}
            self._checked[key] = _runner_safe(reference, values, params, declared)
        return self._checked[key]

    def _start_for(self, reference: str) -> None:
        """A describer that can read ``reference``'s code, fenced as the runner now would
        fence it (its mechanism, or none where the user trusts plug-ins on a kernel without)."""
        how = None if fence(_TRUSTING.get()) == TRUSTED else sandbox.chosen()
        needed = frozenset(readable_for([reference])) if how else frozenset()
        alive = self._process is not None and self._process.is_alive()
        if alive and how == self._how and needed <= self._readable:
            return
        self.close()
        self._checked.clear()  # a new process may import other code under the same name
        self._readable, self._how = self._readable | needed, how
        self._scratch = Path(tempfile.mkdtemp(prefix="fglwb-describer-"))
        ours, theirs = multiprocessing.Pipe()
        readable = sorted(self._readable) if how else None
        serve = "fgl_workbench.attacks.plugins:_serve"
        start = (readable, how, str(self._scratch), kept_environment(), False, serve, (theirs,))
        self._process = multiprocessing.get_context("spawn").Process(
            target=sandbox.run_fenced, args=start, daemon=True
        )
        self._process.start()
        theirs.close()
        self._conn = ours

    def stop(self) -> None:
        """Ends the describer, waiting for any question being answered."""
        with self._lock:
            self.close()

    def close(self) -> None:
        if self._process is not None and self._process.pid is not None:  # it started
            sandbox.kill_session(self._process.pid)  # it and whatever it started
            self._process.kill()
            self._process.join(5)  # a process it left outside its session holds the pipe
        if self._conn is not None:
            self._conn.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._process = self._conn = self._scratch = None


NOT_JSON = "parameters of a plug-in attack must be JSON values (numbers, strings, lists, maps)"


def _invalid(reference: str, problems: list[_Problem], params: dict[str, Any]) -> ValidationError:
    """The plug-in's config errors as our own ``ValidationError``; each input quoted is
    looked up in ``params`` (what we sent), not taken from the describer."""
    return ValidationError.from_exception_data(
        reference,
        [
            {
                "type": PydanticCustomError(p.type, "{message}", {"message": p.msg}),
                "loc": tuple(p.loc),
                "input": _at(params, p.loc),
            }
            for p in problems
        ],
    )


def _runner_safe(
    reference: str, values: dict[str, Any], given: dict[str, Any], declared: set[str]
) -> dict:
    """The plug-in's values, once those the runner reads are within ``RunnerFields`` and
    equal to what the user gave: a config that turned ``client: 0`` into ``-1`` (the last
    client, whose own records the attack would then be asked about) is refused."""
    odd = [k for k in values if not _plain_name(k)]
    if odd:
        raise PluginError(f"attack '{reference}': its config gave a field named {odd[0][:40]!r}")
    read = RunnerFields.model_fields.keys() & values.keys()
    undeclared = sorted(read - declared)  # an adversary it never declared would pick the view
    if undeclared:
        raise PluginError(
            f"attack '{reference}': its config gave {undeclared[0]}, a field it does not declare"
        )
    unset = sorted(k for k in read & REQUIRED if values[k] is None)
    if unset:
        raise PluginError(f"attack '{reference}': its config left {unset[0]} unset (None)")
    try:
        RunnerFields.model_validate(values)
    except ValidationError as exc:
        e = exc.errors()[0]
        field = ".".join(map(str, e["loc"]))
        raise PluginError(
            f"attack '{reference}': its config gave {field} = {_short(_at(values, e['loc']))}, "
            f"which the runner cannot use ({e['msg']})"
        ) from None
    for field in RunnerFields.model_fields.keys() & given.keys():
        if values.get(field) != given[field]:
            raise PluginError(
                f"attack '{reference}': its config changed {field} from {_short(given[field])} "
                f"to {_short(values.get(field))}; the runner uses what the suite says or refuses"
            )
    return values


def _plain_name(name: str) -> bool:
    """A field name that cannot shadow pydantic's own attributes or methods."""
    return bool(re.fullmatch(FIELD_NAME, name)) and not (
        name.startswith("model_") or hasattr(BaseModel, name)
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _out_of_form(where: str, exc: ValidationError) -> PluginError:
    return PluginError(f"{where}: its describer answered out of form ({exc.errors()[0]['msg']})")


def _at(params: Any, loc: Any) -> Any:
    for step in loc:
        try:
            params = params[step]
        except (KeyError, IndexError, TypeError):
            return None
    return params


_DESCRIBER = _Describer()


def stop_describer() -> None:
    """Ends the describer before a plug-in's worker starts, so that no plug-in process lives
    beside a worker: the fifth review's describer, alive through every row, took what one
    row's worker signalled (file locks, inotify) and passed it to a later row's (AUC 1.000).
    A later question starts a new one; the answers given stay known."""
    _DESCRIBER.stop()


def _serve(refused: str | None, conn: Connection) -> None:
    """The describer's life once fenced (``sandbox.run_fenced``; ``refused``: it could not
    be): one JSON answer per question until the runner goes away. A failure is answered as
    one line, never raised."""
    if refused is not None:
        conn.send_bytes(json.dumps({"failed": refused}).encode())
        return
    while True:
        try:
            question = json.loads(conn.recv_bytes())
        except EOFError:
            return
        try:
            answer = _answer(question)
        except Exception as exc:  # the plug-in's failure goes back as a line
            answer = {"failed": f"{type(exc).__name__}: {exc}"}
        conn.send_bytes(json.dumps(answer, default=str).encode())


def _answer(question: dict[str, Any]) -> dict[str, Any]:
    if "describe" in question:
        attack = imported(question["describe"])
        threat = getattr(attack, "threat", None)
        declared = attack.Config.model_fields.get("adversary")
        return {
            "name": attack.name,
            "family": attack.family,
            "threat": None if threat is None else {"sees": threat.sees, "knows": threat.knows},
            "adversaries": None if declared is None else list(get_args(declared.annotation)),
            "adversary_default": None
            if declared is None or declared.is_required()
            else declared.default,
            "fields": list(attack.Config.model_fields),
        }
    attack = imported(question["validate"])
    try:
        config = attack.Config(**question["params"])
    except ValidationError as exc:
        problems = [
            {"type": e["type"], "loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()
        ]
        return {"problems": problems}
    return {"params": config.model_dump(mode="json")}
