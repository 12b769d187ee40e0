"""The HTML report: rendered from literal run data, opened in a real headless Chromium."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cluster.events import Event
from harness.report.html import write_index, write_report
from harness.report.summary import redact
from harness.streams import StreamRecord, write_jsonl
from harness.streams.summary import count_outcomes

T0 = 1_800_000_000.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def make_run(folder: Path, n: int, broken: int, verdict: str) -> Path:
    """A run folder with n records (the first `broken` aborted) and a pod timeline."""
    rng = random.Random(n)
    records = []
    for i in range(n):
        start = T0 - 5 + 10 * i / max(1, n)
        dur = rng.uniform(0.2, 3.0)
        aborted = i < broken
        records.append(
            StreamRecord(
                request_id=f"req-{i:05d}",
                outcome="aborted" if aborted else "complete",
                sent_at=start,
                duration_s=dur,
                status=200,
                ttft_s=rng.uniform(0.05, 0.4),
                finish_reason="abort" if aborted else "stop",
                done=True,
                tokens=rng.randint(1, 50),
                pod="sim-v1-1" if aborted else f"sim-v1-{1 + i % 3}",
                version="v1",
                gateway={"status": 200, "errors": []},
            )
        )
    events = [
        Event(T0 - 6, "pod_created", f"sim-v1-{k}", "node-0", "v1", {"address": f"a{k}"})
        for k in (1, 2, 3)
    ]
    events += [Event(T0 - 5.5, "ready", f"sim-v1-{k}", "node-0", "v1", {}) for k in (1, 2, 3)]
    events += [
        Event(T0, "action", None, None, None, {"action": "evict", "pod": "sim-v1-1"}),
        Event(T0, "terminating", "sim-v1-1", "node-0", "v1", {}),
        Event(T0 + 1, "sigterm", "sim-v1-1", "node-0", "v1", {}),
        Event(T0 + 1.2, "exited", "sim-v1-1", "node-0", "v1", {"code": 0}),
        Event(T0 + 1.3, "pod_removed", "sim-v1-1", "node-0", "v1", {}),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, folder / "records.jsonl")
    (folder / "events.jsonl").write_text("".join(e.to_json() + "\n" for e in events))
    checks = [
        {
            "name": "in_flight_streams_finish",
            "passed": verdict == "pass",
            "observed": f"{broken} of 5",
            "expected": "0 of 5",
            "requests": [r.request_id for r in records[:broken]],
            "hint": None if verdict == "pass" else "set --shutdown-timeout",
        }
    ]
    summary = {
        "scenario": "drain",
        "name": "test_drain[pod]",
        "target": "local",
        "verdict": verdict,
        "requests": n,
        "outcomes": count_outcomes(records),
        "flags": {},
        "gateway": {"status": {"200": n}, "upstream_prematurely_closed": 0},
        "checks": checks,
        "t_act": T0,
        "latency": {},
        "config": {"slo": {"ttft_s": 0.3}},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize(
    "n, broken, verdict",
    [(200, 0, "pass"), (200, 7, "fail"), (0, 0, "pass")],
    ids=["pass", "fail", "empty"],
)
def test_report_renders(tmp_path, n, broken, verdict):
    folder = make_run(tmp_path / "run", n, broken, verdict)
    page = write_report(folder).read_text()
    assert f">{verdict.upper()}<" in page
    assert page.count("<tr><td><code>req-") == broken  # every non-complete stream listed
    if verdict == "fail":
        assert "set --shutdown-timeout" in page and "sigterm +1.00" in page
    if n:
        assert '<svg id="timeline"' in page and "SLO 0.3 s" in page


def test_report_is_self_contained_and_small_at_10000_streams(tmp_path):
    folder = make_run(tmp_path / "big", 10_000, 40, "fail")
    page = write_report(folder).read_text()
    assert len(page.encode()) < 10 * 1024 * 1024
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page


def test_index_links_each_run(tmp_path):
    make_run(tmp_path / "a", 20, 0, "pass")
    make_run(tmp_path / "b", 20, 3, "fail")
    index = write_index(tmp_path).read_text()
    assert "href='a/report.html'" in index and "href='b/report.html'" in index
    assert ">FAIL<" in index


def test_redaction():
    cfg = {"kube": {"api_key": "sk-secret", "namespace": "x"}, "Authorization": "Bearer t"}
    out = json.dumps(redact(cfg))
    assert "sk-secret" not in out and "Bearer t" not in out and "namespace" in out
    counts = {"engine": {"max_answer_tokens": 700, "prefill_s_per_1k_tokens": 0.1}, "token": "t"}
    out = redact(counts)
    assert out["engine"] == counts["engine"]  # counts of tokens are not credentials
    assert out["token"] == "[redacted]"


def test_report_command(tmp_path):
    folder = make_run(tmp_path / "run", 30, 2, "fail")
    (folder / "report.html").unlink(missing_ok=True)
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and (folder / "report.html").exists()
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "not a folder" in r.stderr


@pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (scripts/run test installs it as root)",
)
def test_chromium_draws_the_report_without_console_errors(tmp_path):
    from PIL import Image

    folder = make_run(tmp_path / "run", 500, 12, "fail")
    page_path = write_report(folder)
    png = folder / "timeline.png"
    r = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).parent / "browser_check.py"),
            str(page_path),
            CHROMIUM,
            str(png),
            "req-00003",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["errors"] == []
    assert seen["nested"] == 0  # every point drawn at the top level: no element swallowed the rest
    assert seen["action_lines"] == 1  # the eviction, across the lanes
    box = seen["box"]
    assert box and box["width"] > 1000 and box["height"] > 200
    img = Image.open(png).convert("L")
    colored = img.width * img.height - img.histogram()[255]
    assert colored > 0.02 * img.width * img.height  # bars, lines and points were drawn
    assert seen["visible"] == 2  # the header row and the one matching stream


def test_timeline_window_is_the_scenario_not_the_pods_history():
    """On a cluster pods are hours old: the timeline spans the scenario, clips the pods'
    history (and says so), and names pods whole after their common prefix."""
    import re

    from harness.cluster.events import Event
    from harness.report.html import LEFT, RIGHT, W, _timeline_svg
    from harness.streams import StreamRecord

    t = 1_000_000.0
    pods = ["rollcheck-sim-57996cdbdc-zml9z", "rollcheck-sim-57996cdbdc-abcde"]
    events = [Event(t - 3600, "pod_created", p, None, "v1", {}) for p in pods]
    events += [Event(t - 3590, "ready", p, None, "v1", {}) for p in pods]
    events += [Event(t + 10, "sigterm", pods[0], None, "v1", {})]
    records = [
        StreamRecord(f"r{i}", "complete", t + i, 2.0, status=200, ttft_s=0.1) for i in range(20)
    ]
    svg = _timeline_svg(records, events, t + 10, window=(t - 2, t + 24))
    xs = [float(x) for x in re.findall(r"<circle cx=\"?([\d.]+)", svg)]
    width = W - RIGHT - LEFT
    assert min(xs) - LEFT < 0.15 * width and W - RIGHT - max(xs) < 0.2 * width
    assert "◀ created -3610 s" in svg  # the clipped history, marked
    assert "pods (rollcheck-sim-57996cdbdc-…)" in svg
    assert ">zml9z<" in svg and ">abcde<" in svg  # whole names, not cut at the left edge
    # without the window (the old behaviour) the scenario is squeezed into a sliver
    old = _timeline_svg(records, events, t + 10)
    xs_old = [float(x) for x in re.findall(r"<circle cx=\"?([\d.]+)", old)]
    assert max(xs_old) - min(xs_old) < 0.05 * width
