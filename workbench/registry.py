"""Name → component registries. Targets, attacks, partitioners and datasets register here so
that a suite can refer to them by name and an unknown name gets the list of valid ones.

Targets, attacks and defenses also come from outside the project: from Python entry points
(groups ``fgl_workbench.targets``, ``fgl_workbench.attacks``, ``fgl_workbench.defenses``),
listed the first time a registry is asked for anything and loaded when first asked for, and
from ``package.module:Class`` references written in a suite, loaded when first named. A
registry loads a reference its own way: targets and defenses are imported and checked against
their interface here; attacks are described by a fenced process and never imported here
(``fgl_workbench.attacks.plugins``). A registry remembers where each came from. The lookups
happen lazily, in whatever process asks (suite workers and Ray tasks included)."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from fgl_workbench.errors import ConfigError

T = TypeVar("T")
BUILT_IN = "built-in"
# what untrusted input is being read, while it is: module references in it are not imported
_READING: ContextVar[str | None] = ContextVar("reading_untrusted", default=None)


@contextmanager
def reading_untrusted(what: str) -> Iterator[None]:
    """While reading ``what`` (a results folder, a snapshot), names it gives resolve only to
    components already registered (built-ins, installed entry points, module references the
    user's own suite named in this process): a ``package.module:Class`` written in stored
    data is never imported, so a folder cannot make the workbench run its code."""
    token = _READING.set(what)
    try:
        yield
    finally:
        _READING.reset(token)


def did_you_mean(name: str, choices: list[str]) -> str:
    """The choice nearest a misspelt ``name``, as " (did you mean 'x'?)", if one is close."""
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class PluginError(ConfigError):
    """A plug-in could not be loaded or does not satisfy its interface."""


class Registry(Generic[T]):
    def __init__(
        self,
        kind: str,
        group: str | None = None,
        check: Callable[[Any, str], T] | None = None,
        load: Callable[[str, str], T] | None = None,
    ) -> None:
        """``group``: the entry-point group plug-ins of this kind register under; ``check``
        turns an imported object into a component (instantiating a class) or raises
        ``PluginError`` saying what is missing; ``load`` (reference, where) → component, in
        place of importing and checking the reference in this process."""
        self.kind = kind
        self.group = group
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._pending: dict[str, tuple[str, str]] = {}  # entry point → (reference, origin)
        self._check = check
        self._load = load
        self._plugins_loaded = group is None

    def register(self, name: str, origin: str = BUILT_IN) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = item
            self._origins[name] = origin
            return item

        return add

    def get(self, name: str, field: str | None = None) -> T:
        where = f"{field}: " if field else ""
        reading = _READING.get()
        if reading and isinstance(name, str) and ":" in name and name not in self:
            raise PluginError(
                f"{where}{reading} names the {self.kind} '{name}'; module references in stored "
                "data are not imported (install that component as an entry-point plug-in)"
            )
        if name not in self:
            raise ConfigError(
                f"{where}unknown {self.kind} {name!r}{did_you_mean(str(name), self.names())}; "
                f"valid choices: {', '.join(self.names())}"
                + (" (or a package.module:Class reference)" if self._check else "")
            )
        if name in self._pending:
            reference, origin = self._pending.pop(name)
            self._adopt(name, self._loaded(reference, f"{self.kind} '{name}' ({origin})"), origin)
        return self._items[name]

    def origin(self, name: str) -> str:
        """Where the component came from: built-in, an entry point, a module reference
        (an entry point's without loading it)."""
        self._load_plugins()
        if name in self._pending:
            return self._pending[name][1]
        self.get(name)
        return self._origins[name]

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items.keys() | self._pending.keys())

    def known(self, name: object) -> bool:
        """Registered already (built-in, entry point, or resolved earlier): never loads."""
        self._load_plugins()
        return isinstance(name, str) and (name in self._items or name in self._pending)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        if not isinstance(name, str):
            return False
        if self.known(name):
            return True
        if ":" in name and self._check is not None and not _READING.get():
            origin = "module reference"
            self._adopt(name, self._loaded(name, f"{self.kind} '{name}' ({origin})"), origin)
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.group):
            if ep.name in self._items or ep.name in self._pending:
                raise PluginError(
                    f"entry point '{ep.name} = {ep.value}' ({self.group}): a {self.kind} of "
                    "that name exists already"
                )
            dist = f" [{ep.dist.name} {ep.dist.version}]" if ep.dist is not None else ""
            self._pending[ep.name] = (ep.value, f"entry point {self.group}: {ep.value}{dist}")

    def _loaded(self, reference: str, where: str) -> T:
        """The component ``reference`` names: as ``load`` gives it, or imported and checked."""
        if self._load is not None:
            return self._load(reference, where)
        assert self._check is not None
        try:
            found = resolve(reference)
        except PluginError:
            raise
        except Exception as exc:  # any import failure of a third-party package
            raise PluginError(f"{where} failed to load: {exc}") from exc
        return self._check(found, where)

    def _adopt(self, name: str, item: T, origin: str) -> None:
        own = getattr(item, "name", name)
        if ":" not in name and own != name:
            raise PluginError(
                f"{self.kind} '{name}' ({origin}): its name attribute is '{own}'; the "
                "entry point must carry the same name"
            )
        self._items[name] = item
        self._origins[name] = origin
        # a module reference is also known by its own name, as recipes and workers name it
        if own in self._items and _identity(self._items[own]) != _identity(item):
            raise PluginError(
                f"{self.kind} '{name}' ({origin}): its name '{own}' is taken by the "
                f"{self._origins[own]} {self.kind} of that name; give it another"
            )
        if own not in self._items:
            self._items[own] = item
            self._origins[own] = origin


def _identity(item: Any) -> Any:
    """What makes two registrations the same component: a stand-in's reference, else the
    class (a module reference and its own name adopt the same object)."""
    return getattr(item, "reference", None) or type(item)


def resolve(reference: str) -> Any:
    """The object a ``package.module:Attribute`` reference names."""
    module, _, attr = reference.partition(":")
    try:
        found: Any = importlib.import_module(module)
    except ImportError as exc:
        raise PluginError(f"'{reference}': cannot import module '{module}' ({exc})") from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise PluginError(f"'{reference}': module '{module}' has no attribute '{attr}'")
        found = getattr(found, part)
    return found


def component(loaded: Any, where: str, needs: dict[str, tuple[Callable[[Any], bool], str]]) -> Any:
    """``loaded`` (a class is instantiated without arguments) if it has a ``name``, a
    ``Config`` model and every attribute of ``needs`` (attribute → (test, what is
    expected)); else a ``PluginError`` listing what is missing."""
    needs = {
        "name": (lambda v: isinstance(v, str) and bool(v), "a non-empty str"),
        "Config": (is_config, "a pydantic BaseModel class of its parameters"),
        **needs,
    }
    if isinstance(loaded, type):
        try:
            loaded = loaded()
        except TypeError as exc:
            raise PluginError(f"{where}: its class must build without arguments ({exc})") from None
    missing = [
        f"{attr} ({expected})"
        for attr, (ok, expected) in needs.items()
        if not ok(getattr(loaded, attr, None))
    ]
    if missing:
        raise PluginError(
            f"{where} does not satisfy the interface: missing or invalid " + "; ".join(missing)
        )
    return loaded


def is_config(value: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(value, type) and issubclass(value, BaseModel)
