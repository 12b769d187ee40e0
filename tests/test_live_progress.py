"""Watching a scenario as a user does: the phase lines of a drain in pytest's output, with
and without pytest's live logging, the status of a long wait at its period in a log (no
terminal), Locust's web UI during the run, and the outlook before the first scenario."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from harness.proc import free_port

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[1]
NAME = "test_drain[pod]"
# what a drain says, in this order (the target's events among the scenario's steps)
PHASES = [
    "starting the target: local, 3 replicas",
    "settling: waiting for 3 ready replicas",
    "settled: 3 of 3 replicas ready",
    "load started: 6 users",
    "steady state: ",
    "victim chosen: streams running ",
    "act: evicting rollcheck-sim-v1-",
    "SIGTERM to rollcheck-sim-v1-",
    "recovered: 3 replicas ready and served",
    "cool-down: ",
    "stopping the load: ",
    "judging ",
    "verdict PASS",
]


def drain(tmp_path: Path, *options: str, sets: tuple[str, ...] = ()) -> subprocess.Popen:
    args = [sys.executable, "-m", "pytest", "scenarios", "-k", "drain and pod"]
    args += ["--reports-dir", str(tmp_path), "-p", "no:cacheprovider", *options]
    for s in sets:
        args += ["--set", s]
    return subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finished(proc: subprocess.Popen) -> str:
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    return out


def phase_texts(lines: list[str]) -> list[str]:
    """The text of each phase line ("<name> +12.3s <text>"), wherever the line starts."""
    out = []
    for line in lines:
        m = re.search(re.escape(NAME) + r" \+\d+\.\ds (.*)$", line)
        if m:
            out.append(m.group(1))
    return out


def in_order(texts: list[str], wanted: list[str]) -> list[str]:
    """The wanted phases found in order; the first one missing ends the list."""
    found, i = [], 0
    for w in wanted:
        while i < len(texts) and not texts[i].startswith(w):
            i += 1
        if i == len(texts):
            break
        found.append(w)
    return found


def test_a_drain_says_its_phases_the_periodic_status_and_serves_locusts_web_ui(tmp_path):
    port = free_port()
    proc = drain(
        tmp_path,
        "-rP",  # the captured log of a passing test, as pytest shows it for a failure
        "--deadline-s",
        "5",
        sets=(
            "ui.progress_every_s=1",
            "scenario.cool_down_s=6",  # a wait long enough for its status to repeat
            f"load.web_ui=127.0.0.1:{port}",
        ),
    )
    seen: list[dict] = []

    def watch_web_ui() -> None:
        while proc.poll() is None and not seen:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/stats/requests", timeout=2)
                if r.status_code == 200 and r.json().get("state") == "running":
                    seen.append(r.json())
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)

    watcher = threading.Thread(target=watch_web_ui, daemon=True)
    watcher.start()
    out = finished(proc)
    watcher.join(10)
    lines = out.splitlines()

    # before the first scenario: what runs, its estimate, and the deadline it overruns
    assert "rollcheck: 1 scenario runs selected (drain)" in lines, out[:2000]
    (warning,) = [ln for ln in lines if ln.startswith("rollcheck: WARNING: the worst case")]
    assert "exceeds the deadline of 5s (--deadline-s)" in warning and "shorten " in warning

    # on the terminal, by rollcheck itself (pytest's live logging is off), in order
    terminal = phase_texts([ln for ln in lines if ln.startswith(f"rollcheck {NAME} +")])
    assert in_order(terminal, PHASES) == PHASES, "\n".join(terminal)
    # the engine's own gauge named the victim's streams; the new pod's readiness is said
    assert any(
        re.match(r"victim chosen: streams running \d+ on rollcheck-sim-v1-\d", t) for t in terminal
    )
    assert any(re.match(r"pod rollcheck-sim-v1-4 ready \(\d of 3 ready\)", t) for t in terminal)

    # pytest's captured log holds the same lines
    captured = out[out.index("Captured log") :]
    logged = phase_texts([ln for ln in captured.splitlines() if ln.startswith("INFO ")])
    assert in_order(logged, PHASES) == PHASES, captured[:3000]

    # no terminal: the cool-down's status as a plain line at its period (1 s)
    cooling = [
        int(m.group(1))
        for t in terminal
        if (
            m := re.match(
                r"waiting for the cool-down: (\d+)s of 6s; requests \d+ sent, "
                r"\d+ complete, \d+ broken, \d+ in flight",
                t,
            )
        )
    ]
    assert len(cooling) >= 2 and cooling == sorted(cooling), terminal

    # Locust's web UI answered while the scenario ran, and every request has its record
    assert seen and seen[0]["stats"], "the web UI never answered on its port"
    (summary_path,) = tmp_path.glob("*/*/summary.json")
    summary = json.loads(summary_path.read_text())
    accounting = next(c for c in summary["checks"] if c["name"] == "accounting")
    assert accounting["status"] == "pass", accounting
    status = json.loads((summary_path.parent / "load" / "status.json").read_text())
    records = (summary_path.parent / "records.jsonl").read_text().splitlines()
    assert status["sent"] == len(records) > 0

    # the verdict line at the end: wall time and the share spent waiting
    timing = summary["timing"]
    assert 0 < timing["waiting_s"] <= timing["wall_s"]
    (verdict,) = [ln for ln in lines if ln.startswith(f"rollcheck: {NAME} PASS")]
    assert re.search(r"; \d+s, \d+% waiting \(longest: .+, \d+s\)$", verdict), verdict


def test_with_pytests_live_logging_pytest_prints_the_phases_once(tmp_path):
    out = finished(drain(tmp_path, "-o", "log_cli=true"))
    lines = out.splitlines()
    live = phase_texts([ln for ln in lines if "rollcheck:progress.py" in ln])
    assert in_order(live, PHASES) == PHASES, out[-3000:]
    assert not [ln for ln in lines if ln.startswith(f"rollcheck {NAME} +")]  # not twice


def test_without_pytests_logging_plugin_the_phases_still_show(tmp_path):
    out = finished(drain(tmp_path, "-p", "no:logging", "--set", "ui.progress_every_s=0"))
    terminal = phase_texts([ln for ln in out.splitlines() if ln.startswith(f"rollcheck {NAME}")])
    assert in_order(terminal, PHASES) == PHASES, out[-3000:]
    assert len(terminal) == len(set(terminal)) and not [
        t for t in terminal if t.startswith("waiting for")
    ]
