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
        "plug-in attacks: this kernel cannot sandbox them (no Landlock, no user namespaces) "
        f"or {sandbox.SANDBOX_VARIABLE}=none says not to; pass "
        "--trust-plugins (suite: trust_plugins: true) to run them unfenced"
    )


def kept_environment() -> dict[str, str]:
    """The runner's environment as a plug-in's process gets it."""
    listed = {n.strip() for n in os.environ.get(PLUGIN_ENVIRONMENT, "").split(",") if n.strip()}
    keep = set(KEPT_ENVIRONMENT) | listed
    return {k: v for k, v in os.environ.items() if k in keep or k.startswith("CUDA")}


def enter_fence(
    readable: list[Path] | None, how: str | None, scratch: Path, environment: dict[str, str]
) -> None:
    """A plug-in's process before it imports any plug-in: the environment replaced by
    ``environment``, temporary files in ``scratch``, and the fence ``how`` (chosen in the
    runner; ``readable`` None: the user trusted it unfenced) with ``scratch`` as the only
    writable folder."""
    os.environ.clear()
    os.environ.update(environment, TMPDIR=str(scratch))
    tempfile.tempdir = str(scratch)
    if readable is not None:
        sandbox.enter(readable, [scratch, *map(Path, sandbox.DEVICES_RW)], how)


def readable_for(references: list[str]) -> list[Path]:
    """What a fenced plug-in process reads: Python, the workbench, the plug-ins' own code."""
    return sandbox.readable_paths() + sandbox.plugin_paths(GROUP, references)


def imported(reference: str) -> Any:
    """The attack ``reference`` (``module:Attribute``) names, imported and checked against
    the interface: only ever called in a plug-in's fenced process."""
    return attack_plugin(resolve(reference), f"attack '{reference}'")


class PluginParams(BaseModel):
    """A plug-in attack's parameters, checked by its own ``Config`` in the describer: the
    fields it declares are listed here (the adversary with its choices) and hold the values
    the plug-in's model gave them."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __plugin_reference__: ClassVar[str]

    def __init__(self, **params: Any) -> None:
        super().__init__(**_DESCRIBER.validated(self.__plugin_reference__, params))


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


Party = Literal["querier", "server", "client"]


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
    taken = [f for f in found.fields if f.startswith("model_") or hasattr(BaseModel, f)]
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
            if not self._conn.poll(ANSWER_SECONDS):
                self.close()
                raise PluginError(f"attack '{reference}': no answer in {ANSWER_SECONDS:.0f} s")
            try:
                answer = json.loads(self._conn.recv_bytes(REPLY_BYTES))
            except (EOFError, OSError, ValueError) as exc:
                self.close()
                raise PluginError(f"attack '{reference}': its describer failed ({exc})") from None
        if not isinstance(answer, dict):
            raise PluginError(f"attack '{reference}': its describer answered out of form")
        if "failed" in answer:
            raise PluginError(str(answer["failed"])[:TEXT])
        return answer

    def validated(self, reference: str, params: dict[str, Any]) -> dict[str, Any]:
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
            self._checked[key] = checked.params or {}
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
        start = (theirs, readable, how, str(self._scratch), kept_environment())
        self._process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=start, daemon=True
        )
        self._process.start()
        theirs.close()
        self._conn = ours

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
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


def _out_of_form(where: str, exc: ValidationError) -> PluginError:
    return PluginError(f"{where}: its describer answered out of form ({exc.errors()[0]['msg']})")


def _at(params: Any, loc: list[str | int]) -> Any:
    for step in loc:
        try:
            params = params[step]
        except (KeyError, IndexError, TypeError):
            return None
    return params


_DESCRIBER = _Describer()


def _serve(
    conn: Connection, readable: list[Path] | None, how: str | None, scratch: str, env: dict
) -> None:
    """The describer's life: fenced before it imports any plug-in, then one JSON answer per
    question until the runner goes away. A failure is answered as one line, never raised."""
    try:
        enter_fence(readable, how, Path(scratch), env)
    except sandbox.SandboxError as exc:
        conn.send_bytes(json.dumps({"failed": str(exc)}).encode())
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
