"""Reports built from a results folder."""

from reports.html import build_report

__all__ = ["build_report"]
