"""The types a snapshot may name: an explicit allow-list.

A snapshot is untrusted input (a results folder may come from anyone), and "build the class
this file names with these fields" runs whatever that class does when built: a snapshot naming
``subprocess:Popen`` ran a command inside ``restore``. So restoring builds only classes
registered here: the built-in architecture specs, model configs and query APIs, and what an
installed plug-in registers when it is loaded (``@storable`` on its own spec or config, next to
its registry entry). Nothing a file names is imported or looked up elsewhere."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound=type)

_STORABLE: dict[str, type] = {}
# Before the one namespace (issue 42) the workbench installed these top-level packages, and
# snapshots written then name the built-in types by them: ``workbench.models:ModelSpec`` is
# ``fgl_workbench.models:ModelSpec``.
_FORMER_PACKAGES = {
    "workbench": "fgl_workbench",
    "attacks": "fgl_workbench.attacks",
    "audits": "fgl_workbench.audits",
    "defenses": "fgl_workbench.defenses",
    "accountants": "fgl_workbench.accountants",
    "reports": "fgl_workbench.reports",
}


class NotStorableError(ValueError):
    """A stored type name that is not on the allow-list (or not of the expected kind)."""


def type_ref(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def storable(cls: T) -> T:
    """Class decorator: snapshots may store and rebuild instances of ``cls``."""
    _STORABLE[type_ref(cls)] = cls
    return cls


def stored_type(reference: object, *bases: type) -> type:
    """The allow-listed class ``reference`` names; with ``bases``, only one deriving from
    them."""
    cls = None
    if isinstance(reference, str):
        cls = _STORABLE.get(reference) or _STORABLE.get(_renamed(reference))
    if cls is None:
        raise NotStorableError(
            f"the snapshot names the type {reference!r}, which no installed component "
            "registered as storable (install the plug-in that defines the target)"
        )
    if bases and not issubclass(cls, bases):
        raise NotStorableError(f"{reference!r} is not a {' or '.join(b.__name__ for b in bases)}")
    return cls


def _renamed(reference: str) -> str:
    """``reference`` as the same type is named since issue 42 (itself if not a former name)."""
    top, dot, rest = reference.partition(".")
    return f"{_FORMER_PACKAGES[top]}{dot}{rest}" if dot and top in _FORMER_PACKAGES else reference
