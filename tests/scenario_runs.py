"""Run the scenarios as a user does (`pytest scenarios -k ... --set ...`) and read the verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_scenarios(
    reports_dir: Path,
    select: str,
    *sets: str,
    options: tuple[str, ...] = (),
    timeout_s: float = 600,
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The pytest process and the summary.json of every scenario run it wrote."""
    args = [
        sys.executable,
        "-m",
        "pytest",
        "scenarios",
        "-k",
        select,
        "-q",
        "--reports-dir",
        str(reports_dir),
        "-p",
        "no:cacheprovider",
        *options,
    ]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    summaries = [json.loads(p.read_text()) for p in sorted(reports_dir.glob("*/*/summary.json"))]
    return proc, summaries
