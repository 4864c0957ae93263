"""Attacks: each gets one adversary's view and returns scores; metrics are computed outside
the attack from ground truth. Importing a module registers it."""

from attacks.attribute import inference, label_distribution  # noqa: F401
from attacks.base import ATTACKS, Attack, AttackInput, AttackOutput, Candidates
from attacks.membership import lira, rmia, shadow, threshold  # noqa: F401
from attacks.reconstruction import graph_reconstruction, link_stealing, link_teller  # noqa: F401

__all__ = ["ATTACKS", "Attack", "AttackInput", "AttackOutput", "Candidates"]
