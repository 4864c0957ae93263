"""The attack families by name: the runner asks an attack's family for its inputs here.
(Kept apart from ``attacks/__init__``: the families import the challenges, which import
``fgl_workbench.attacks.base``.)"""

from __future__ import annotations

from fgl_workbench.attacks.attribute.family import Attribute, Distribution, RecordSource, Source
from fgl_workbench.attacks.audit_family import Audit
from fgl_workbench.attacks.base import Attack
from fgl_workbench.attacks.family import AttackFamily
from fgl_workbench.attacks.membership.family import Membership
from fgl_workbench.attacks.reconstruction.family import ClientData, Feature, Link

FAMILIES: dict[str, AttackFamily] = {
    f.name: f
    for f in (
        Membership(),
        Attribute(),
        Distribution(),
        Source(),
        RecordSource(),
        Link(),
        Feature(),
        ClientData(),
        Audit(),
    )
}


def adversaries(attack: Attack) -> tuple[str, ...]:
    """The parties ``attack`` can be run as."""
    return FAMILIES[attack.family].adversaries(attack.Config)
