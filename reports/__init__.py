"""Reports built from a results folder: HTML and PDF of the same content."""

from fgl_workbench.reports.report import build_report

__all__ = ["build_report"]
