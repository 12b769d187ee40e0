"""The run folder: summary.json (summary.py, machine-readable), report.html (html.py, for
people), written together by run.py; pages over several sessions in compare.py."""

from harness.report.run import write_run

__all__ = ["write_run"]
