"""Reconstruction attacks: what the adversary rebuilds of the clients' private graphs."""
