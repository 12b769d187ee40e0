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
    """The pytest process and the summary.json of every scenario run it wrote. The
    process's exit status is held to what a CI job reads from it (check_exit)."""
    args = [
        sys.executable,
        # a fatal error (SIGABRT, SIGSEGV) prints every thread's stack on stderr
        "-X",
        "faulthandler",
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
    check_exit(proc, summaries)
    return proc, summaries


def check_exit(proc: subprocess.CompletedProcess, summaries: list[dict]) -> None:
    """The exit status means what the run found, as a nightly Job's status does: never
    a signal or an abort after the last line (SIGABRT is 134, or -6), and 0 exactly when
    no scenario FAILed or was INCONCLUSIVE."""
    code = proc.returncode
    tail = proc.stdout[-1500:] + "\n--- stderr ---\n" + proc.stderr[-4000:]
    assert 0 <= code < 6, f"pytest ended with status {code} (a signal or an abort):\n{tail}"
    # a thread of rollcheck's alive at exit can abort it (harness/threads.py): never one
    assert "threads still running at exit" not in proc.stderr, tail
    broken = [s["name"] for s in summaries if s.get("verdict") in ("fail", "inconclusive")]
    if broken:
        assert code == 1, f"{broken} did not pass, yet pytest exited {code}:\n{tail}"
    if code == 0:
        assert not broken, tail
