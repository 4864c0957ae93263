"""Membership inference attacks."""
