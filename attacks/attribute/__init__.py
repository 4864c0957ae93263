"""Attribute inference: what the adversary learns about the clients' data beyond membership."""
