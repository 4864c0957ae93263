"""The attack families by name: the runner asks an attack's family for its inputs here.
(Kept apart from ``attacks/__init__``: the families import the challenges, which import
``attacks.base``.)"""

from __future__ import annotations

from attacks.attribute.family import Attribute, Distribution, Source
from attacks.audit_family import Audit
from attacks.base import Attack
from attacks.family import AttackFamily
from attacks.membership.family import Membership
from attacks.reconstruction.family import ClientData, Feature, Link

FAMILIES: dict[str, AttackFamily] = {
    f.name: f
    for f in (
        Membership(),
        Attribute(),
        Distribution(),
        Source(),
        Link(),
        Feature(),
        ClientData(),
        Audit(),
    )
}


def adversaries(attack: Attack) -> tuple[str, ...]:
    """The parties ``attack`` can be run as."""
    return FAMILIES[attack.family].adversaries(attack.Config)
