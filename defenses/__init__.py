"""Defenses hook one stage of a target's pipeline and record their DP events in the ledger."""
