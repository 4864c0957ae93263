"""Reports built from a results folder: HTML and PDF of the same content. Reads storage and the
attacks' and audits' metrics, never runs anything (no running); imported only by interface."""

from fgl_workbench.reports.report import build_report

__all__ = ["build_report"]
