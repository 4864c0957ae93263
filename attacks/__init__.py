"""Attacks: each declares the view it needs and returns scores; metrics are computed outside
the attack from ground truth. Importing a module registers it."""

from attacks.base import ATTACKS, Attack, AttackInput, AttackOutput, Candidates
from attacks.membership import threshold  # noqa: F401

__all__ = ["ATTACKS", "Attack", "AttackInput", "AttackOutput", "Candidates"]
