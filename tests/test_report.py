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
from urllib.parse import unquote

import pytest

from harness.events import Event
from harness.report.html import write_index, write_report
from harness.report.summary import redact
from harness.streams import GatewayLine, StreamRecord, write_jsonl
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
                gateway=GatewayLine(f"req-{i:05d}", 200, "a1", "200", 100, dur, start + dur),
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


@pytest.mark.unit
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


@pytest.mark.unit
@pytest.mark.parametrize("act", ["kill", "to_zero"])
def test_a_pd_prefill_run_shows_each_prefill_waiting_on_the_act_and_the_decode_pods_view(
    tmp_path, act
):
    folder = make_run(tmp_path / "run", 20, 2, "fail")
    summary = json.loads((folder / "summary.json").read_text())
    summary["pd_prefill"] = {
        "act": act,
        "victim": "prefill-7f9c-abc12",
        "prefill_recovered_s": 4.25 if act == "kill" else None,
        "waiting": [
            {"request_id": "rc-1-<b>", "status": 502, "upstream_status": "502", "ended_s": 0.4},
            {"request_id": "rc-2", "status": 200, "upstream_status": None, "ended_s": 31.0},
        ],
        "decode_view": {"passed_on": 1, "fallback": 3, "why": {"connect refused ...": 4}},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    page = write_report(folder).read_text()
    title = (
        "P/D prefill: the prefill role scaled to zero"
        if act == "to_zero"
        else "P/D prefill: prefill pod prefill-7f9c-abc12 killed"
    )
    assert title in page
    assert "2 prefills in flight there at the act" in page
    assert "<code>rc-1-&lt;b&gt;</code></td><td class=num>502</td>" in page
    assert "<td class=num>+31.0</td>" in page
    assert "passed 1 failed prefills on as their client's error and prefilled 3" in page
    assert "4 × connect refused ..." in page
    served = "served again 4.2 s after" if act == "kill" else "did not serve again within"
    assert served in page
    assert "None" not in page.split(title)[1].split("<h2>")[0]


@pytest.mark.unit
def test_hand_edited_pd_sections_render_as_text_not_a_traceback(tmp_path):
    """A summary edited by hand: text where the P/D sections keep seconds, markup in it."""
    folder = make_run(tmp_path / "run", 10, 0, "pass")
    summary = json.loads((folder / "summary.json").read_text())
    bad = "<i>soon</i>"
    summary["pd_prefill"] = {
        "act": "kill",
        "victim": "p<1>",
        "prefill_recovered_s": bad,
        "waiting": [{"request_id": "r", "status": 200, "upstream_status": None, "ended_s": bad}],
        "decode_view": {"passed_on": 0, "fallback": 0, "why": {}},
    }
    summary["pd_rollout"] = {
        "versions": ["v1", "v2"],
        "order": "together",
        "roles_finished_s": {"prefill": bad, "decode": None},
        "summary": {"mixed": 1, "counts": {"mixed": 1}, "first_mixed_s": bad, "last_mixed_s": 2,
                    "mixing_s": bad, "answers": 1},
        "answers": [{"version": "mixed", "sent_s": bad, "prompt_id": "p"}],
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    page = write_report(folder).read_text()
    assert "<i>" not in page and page.count("&lt;i&gt;soon&lt;/i&gt;") == 6
    assert "prefill pod p&lt;1&gt; killed" in page and "decode rolled by – s" in page


@pytest.mark.unit
def test_report_is_self_contained_and_small_at_10000_streams(tmp_path):
    folder = make_run(tmp_path / "big", 10_000, 40, "fail")
    page = write_report(folder).read_text()
    assert len(page.encode()) < 10 * 1024 * 1024
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page


@pytest.mark.unit
def test_index_links_each_run(tmp_path):
    write_report(make_run(tmp_path / "a", 20, 0, "pass"))
    write_report(make_run(tmp_path / "b", 20, 3, "fail"))
    make_run(tmp_path / "c", 20, 0, "pass")  # its report not written (yet): not linked
    index = write_index(tmp_path).read_text()
    assert "href='a/report.html'" in index and "href='b/report.html'" in index
    assert "href='c/report.html'" not in index
    assert ">FAIL<" in index


@pytest.mark.unit
def test_redaction():
    cfg = {"kube": {"api_key": "sk-secret", "namespace": "x"}, "Authorization": "Bearer t"}
    out = json.dumps(redact(cfg))
    assert "sk-secret" not in out and "Bearer t" not in out and "namespace" in out
    counts = {"engine": {"max_answer_tokens": 700, "prefill_s_per_1k_tokens": 0.1}, "token": "t"}
    out = redact(counts)
    assert out["engine"] == counts["engine"]  # counts of tokens are not credentials
    assert out["token"] == "[redacted]"


@pytest.mark.process
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


def browser_check(page: Path, png: Path, filter_text: str) -> dict:
    """tests/browser_check.py in its own process: what Chromium saw, as a dict."""
    script = Path(__file__).parent / "browser_check.py"
    r = subprocess.run(
        [sys.executable, str(script), str(page), CHROMIUM, str(png), filter_text],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.browser
@pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (scripts/run test installs it as root)",
)
def test_chromium_draws_the_report_without_console_errors(tmp_path):
    from PIL import Image

    folder = make_run(tmp_path / "run", 500, 12, "fail")
    page_path = write_report(folder)
    png = folder / "timeline.png"
    seen = browser_check(page_path, png, "req-00003")
    assert seen["errors"] == []
    assert seen["nested"] == 0  # every point drawn at the top level: no element swallowed the rest
    assert seen["action_lines"] == 1  # the eviction, across the lanes
    box = seen["box"]
    assert box and box["width"] > 1000 and box["height"] > 200
    img = Image.open(png).convert("L")
    colored = img.width * img.height - img.histogram()[255]
    assert colored > 0.02 * img.width * img.height  # bars, lines and points were drawn
    assert seen["visible"] == 2  # the header row and the one matching stream


@pytest.mark.unit
def test_timeline_window_is_the_scenario_not_the_pods_history():
    """On a cluster pods are hours old: the timeline spans the scenario, clips the pods'
    history (and says so), and names pods whole after their common prefix."""
    import re

    from harness.events import Event
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


def make_kube_run(folder: Path) -> Path:
    """A failing drain on the Kubernetes target without gateway logs: pods an hour old,
    no stream traced to a pod, the SIGTERM estimated from the pod spec."""
    pods = ["rollcheck-sim-57996cdbdc-zml9z", "rollcheck-sim-57996cdbdc-abcde"]
    victim = pods[0]
    records = []
    for i in range(80):
        start = T0 - 20 + i * 0.5
        dur = 3.0
        cut = start <= T0 < start + dur and i % 2 == 0  # the victim's half of the in-flight
        records.append(
            StreamRecord(
                request_id=f"req-{i:05d}",
                outcome="error_event" if cut else "complete",
                sent_at=start,
                duration_s=(T0 + 0.1 - start) if cut else dur,
                status=200,
                ttft_s=0.1,
                finish_reason=None if cut else "stop",
                done=True,
                tokens=20,
            )
        )
    events = [Event(T0 - 3600, "pod_created", p, "n1", "v1", {}) for p in pods]
    events += [Event(T0 - 3590, "ready", p, "n1", "v1", {}) for p in pods]
    events += [
        Event(T0 - 20, "action", None, None, None, {"action": "steady_state"}),
        Event(T0, "action", None, None, None, {"action": "evict", "pod": victim}),
        Event(T0, "terminating", victim, "n1", "v1", {}),
        Event(T0, "sigterm", victim, "n1", "v1", {"estimated": True}),
        Event(T0 + 6, "pod_removed", victim, "n1", "v1", {}),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, folder / "records.jsonl")
    (folder / "events.jsonl").write_text("".join(e.to_json() + "\n" for e in events))
    broken = [r.request_id for r in records if r.outcome != "complete"]
    summary = {
        "scenario": "drain",
        "name": "test_drain[pod]",
        "target": "kube",
        "verdict": "fail",
        "requests": len(records),
        "outcomes": count_outcomes(records),
        "checks": [
            {
                "name": "no_broken_streams",
                "status": "fail",
                "passed": False,
                "observed": f"{len(broken)} broken",
                "expected": "0",
                "requests": broken,
                "hint": None,
            }
        ],
        "t_start": T0 - 20,
        "t_act": T0,
        "t_end": T0 + 25,
        "victims": [victim],
        "latency": {},
        "config": {"slo": {"ttft_s": 0.3}},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@pytest.mark.unit
def test_kube_report_zooms_into_the_disruption_and_names_what_broke_each_stream(tmp_path):
    from harness.report.html import LEFT, RIGHT, W

    page = write_report(make_kube_run(tmp_path / "run")).read_text()
    zoom = page[page.index('<svg id="zoom"') :]
    zoom = zoom[: zoom.index("</svg>")]
    width = W - RIGHT - LEFT
    bars = re.findall(r'<rect class="bar" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', zoom)
    broken = [b for b in re.findall(r'class="bar".*?fill="(#[0-9a-f]+)"', zoom) if b == "#ad1457"]
    assert len(broken) == 3  # every broken stream is its own bar
    starts = [float(x) for x, _ in bars]
    ends = [float(x) + float(w) for x, w in bars]
    # the disruption (-1 s .. the victim's removal +6 s) fills the zoomed view
    assert max(ends) - min(starts) > 0.9 * width
    sigterm = re.search(r'<line class="mark" x1="([\d.]+)"[^>]*stroke="#e65100"', zoom)
    assert sigterm and float(sigterm.group(1)) < LEFT + 0.25 * width
    assert "◀ created -3600 s" in zoom
    # each broken stream names the estimated SIGTERM, and that its pod is unknown
    assert page.count("sigterm (estimated) on rollcheck-sim-57996cdbdc-zml9z at +0.00 s") == 3
    assert "stream not traced to a pod" in page


# --- comparing sessions, and the nightly's history ------------------------------------


def make_session(folder: Path, runs: dict[str, tuple[str, float, float]], n: int = 60) -> Path:
    """A session folder: per run name, (verdict, goodput share, how many times slower its
    first tokens are than a healthy run's); each session draws its own per-request values."""
    for i, (name, (verdict, good, slower)) in enumerate(runs.items()):
        run = make_run(folder / f"{i:02d}-{name}", n, 0 if verdict == "pass" else 4, verdict)
        rng = random.Random(f"{folder.name}/{name}")
        records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
        for r in records:
            r["ttft_s"] = rng.uniform(0.05, 0.4) * slower
        (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        s = json.loads((run / "summary.json").read_text())
        n_req = s["requests"]
        s["name"] = name
        s["goodput"] = {
            p: {"good": round(good * n_req), "requests": n_req, "share": good}
            for p in ("all", "before", "during", "after")
        }
        (run / "summary.json").write_text(json.dumps(s))
        write_report(run)
    return folder


def rollcheck(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", *map(str, args)],
        capture_output=True,
        text=True,
    )


@pytest.mark.process
def test_compare_two_sessions(tmp_path):
    base = make_session(
        tmp_path / "20261130-020000-kube",
        {
            "test_drain[pod]": ("pass", 0.99, 1),
            "test_rollout[surge]": ("fail", 0.80, 4),
            "test_pod_kill": ("pass", 0.97, 1),
        },
    )
    cand = make_session(
        tmp_path / "20261201-020000-kube",
        {
            "test_drain[pod]": ("fail", 0.80, 3),  # regressed
            "test_rollout[surge]": ("pass", 0.99, 1),  # improved
        },
    )
    out = tmp_path / "compare.html"
    r = rollcheck("--compare", base, cand, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "2 scenario runs in both; 1 regressed, 1 improved, 0 the same" in r.stdout
    assert "only in the baseline 1" in r.stdout
    page = out.read_text()
    overview = page[page.index("<table>") : page.index("</table>")]
    rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"<tr><td><a href='#([^']+)'>.*?<td class='([a-z]*)'>", overview)
    }
    assert rows == {"test_drain[pod]": "worse", "test_rollout[surge]": "better"}
    drain = page[page.index("<h2 id='test_drain[pod]'>") :]
    drain = drain[: drain.index("</table>")]
    assert re.search(r"<td>verdict</td><td class=num>PASS</td><td class='num worse'>FAIL", drain)
    goodput = re.search(
        r"goodput during</td><td class=num>0.990</td><td class='num worse'>0.800.*?</tr>", drain
    )
    assert goodput and "Fisher exact p = 0.002, 59 of 60 and 48 of 60 good" in goodput[0], drain
    ttft = re.search(r"TTFT, median</td><td class=num>([\d.]+)</td><td class='num worse'>", drain)
    assert ttft and "Mann-Whitney U p = " in drain and "n = 60 and 56" in drain, drain
    # the same answers, so the same time per output token: no change claimed
    assert re.search(
        r"per output token, median</td><td class=num>[\d.]+</td><td class='num '>", drain
    )
    only = page[page.index("Only in the baseline") :]
    assert "test_pod_kill" in only[: only.index("</ul>")]
    for href in re.findall(r"<a href='([^'#]+)'", page):  # both sessions' reports, relative
        assert (out.parent / unquote(href)).is_file(), href
    assert rollcheck("--compare", base, cand, "--out", out, "--fail-on-regression").returncode == 1


@pytest.mark.process
def test_two_sessions_of_the_same_healthy_config_are_not_a_regression(tmp_path):
    """Both drains PASS; their per-request values differ only by noise, one request of 60
    over the TTFT SLO in the rerun (a stall of a busy machine) is not a goodput regression,
    and 12 requests a run cannot tell anything (a 10% move of one percentile, and one such
    request in 67, were called regressions, and failed the job under --fail-on-regression)."""
    healthy = {"test_drain[pod]": ("pass", 1.0, 1), "test_pod_kill": ("pass", 1.0, 1)}
    base = make_session(tmp_path / "20261130-020000-local", healthy)
    rerun = healthy | {"test_pod_kill": ("pass", 59 / 60, 1)}
    cand = make_session(tmp_path / "20261201-020000-local", rerun)
    out = tmp_path / "compare.html"
    r = rollcheck("--compare", base, cand, "--out", out, "--fail-on-regression")
    assert r.returncode == 0 and "0 regressed, 0 improved, 2 the same" in r.stdout, r.stdout
    page = out.read_text()
    assert "within the noise at 0.01" in page
    assert "Fisher exact p = 1, 60 of 60 and 59 of 60 good: within the noise at 0.01" in page
    small = {"test_drain[pod]": ("pass", 1.0, 1)}
    base = make_session(tmp_path / "a", small, n=12)
    cand = make_session(tmp_path / "b", {"test_drain[pod]": ("pass", 1.0, 3)}, n=12)
    r = rollcheck("--compare", base, cand, "--out", out, "--fail-on-regression")
    assert r.returncode == 0 and "0 regressed" in r.stdout, r.stdout
    assert "cannot tell: 12 and 12 requests" in out.read_text()


@pytest.mark.process
def test_compare_and_history_refuse_what_is_not_a_session(tmp_path):
    base = make_session(tmp_path / "a", {"test_drain[pod]": ("pass", 1.0, 0.2)})
    other = make_session(tmp_path / "b", {"test_canary": ("pass", 1.0, 0.2)})
    (tmp_path / "empty").mkdir()
    for args, words in [
        (("--compare", base, tmp_path / "empty"), "is not a rollcheck session"),
        (("--compare", base, other), "no scenario run in common"),
        (("--compare", base, tmp_path / "nowhere"), "is not a folder"),
        (("--history", tmp_path / "empty"), "holds no rollcheck sessions"),
        (("--history", base, "--out", tmp_path / "x.html"), "holds no rollcheck sessions"),
        ((base, "--history", tmp_path), "give one of"),
    ]:
        r = rollcheck(*args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.process
def test_history_of_three_nights(tmp_path):
    nights = [
        ("20261129-020000-kube", {"drain": ("pass", 0.99, 0.2), "rollout": ("fail", 0.7, 1)}),
        (
            "20261130-020000-kube",
            {
                "drain": ("pass", 0.98, 0.2),
                "rollout": ("pass", 0.99, 1),
                "canary": ("inconclusive", 0.9, 1),
            },
        ),
        (
            "20261201-020000-kube",
            {
                "drain": ("fail", 0.80, 0.2),
                "rollout": ("pass", 0.99, 1),
                "canary": ("fail", 0.5, 1),
            },
        ),
    ]
    for name, runs in nights:
        make_session(tmp_path / name, runs)
    (tmp_path / "not-a-session").mkdir()  # other folders are passed over
    r = rollcheck("--history", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 scenario runs, 2 not passing now" in r.stdout
    page = (tmp_path / "history.html").read_text()
    assert "3 sessions from 2026-11-29 02:00 to 2026-12-01 02:00" in page
    row = {
        n: page[page.index(f"<tr><td>{n}</td>") :].split("</tr>")[0]
        for n in ("drain", "rollout", "canary")
    }
    assert "since 2026-12-01 02:00 (1 night)" in row["drain"]
    assert "since 2026-11-30 02:00 (2 nights)" in row["canary"] and "not run" in row["canary"]
    assert "since" not in row["rollout"]
    assert re.findall(r">(PASS|FAIL|INCONCLUSIVE)</a>", row["drain"]) == ["PASS", "PASS", "FAIL"]
    assert row["drain"].count("<circle") == 3  # the goodput trend, one point a night
    for href in re.findall(r"<a href='([^']+)'", page):
        assert (tmp_path / unquote(href)).is_file(), href


@pytest.mark.browser
@pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (scripts/run test installs it as root)",
)
def test_chromium_draws_the_comparison_and_history_without_console_errors(tmp_path):
    base = make_session(tmp_path / "20261130-020000-kube", {"test_drain[pod]": ("pass", 0.99, 0.2)})
    cand = make_session(tmp_path / "20261201-020000-kube", {"test_drain[pod]": ("fail", 0.8, 0.6)})
    assert rollcheck("--compare", base, cand).returncode == 0
    assert rollcheck("--history", tmp_path).returncode == 0
    for page in (cand / "compare.html", tmp_path / "history.html"):
        png = tmp_path / (page.stem + ".png")
        seen = browser_check(page, png, "-")
        assert seen["errors"] == [] and seen["links"] >= 2 and seen["tables"] >= 1
        assert png.stat().st_size > 5000


@pytest.mark.unit
def test_a_corrupt_summary_is_listed_not_the_end_of_the_history_or_index(tmp_path):
    """A truncated summary.json kept by --keep-sessions made every later session end in a
    traceback at the history step."""
    from harness.pytest_plugin import verdict_lines
    from harness.report.compare import write_history

    good = tmp_path / "20261102-020000-local"
    make_run(good / "a", 20, 0, "pass")
    bad = tmp_path / "20261101-020000-local"
    make_run(bad / "a", 20, 0, "pass")
    (bad / "a" / "summary.json").write_text('{"verdict": "pa')
    make_run(bad / "b", 20, 0, "pass")
    (bad / "b" / "summary.json").write_text("[]")
    page, table = write_history(tmp_path)
    text = page.read_text()
    assert "Runs passed over (2)" in text and "not readable JSON" in text
    assert "holds a JSON list" in text
    index = write_index(bad).read_text()
    assert "Runs passed over (2)" in index and "INCONCLUSIVE" in index
    assert any("not readable JSON" in line for line in verdict_lines(bad))


MARKUP = "<b class=pwn id=pwn onmouseover=x>pwn</b><img src=x onerror='window.__pwned=1'>'\"><script>window.__pwned=1</script>"


def _plant(value):
    """Markup in every text of a summary, and in the keys and numbers of its counts (the
    outcome and flag tables): a hand-edited summary may hold anything there."""
    if isinstance(value, dict):
        counts = value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value.values()
        )
        if counts:
            return {k + MARKUP: MARKUP for k in value}
        return {k: _plant(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plant(v) for v in value]
    if isinstance(value, str):
        return value + MARKUP
    return value


@pytest.mark.browser
@pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (scripts/run test installs it as root)",
)
def test_markup_in_every_field_stays_text_in_chromium(tmp_path):
    """Records, events and summaries crafted with markup in every field, a run folder named
    with a quote and a session named javascript:...: Chromium's DOM holds none of it live."""
    session = tmp_path / "javascript:window.__pwned=1;"
    folder = make_run(session / "x' onmouseover='window.__pwned=1", 40, 4, "fail")
    summary = json.loads((folder / "summary.json").read_text())
    planted = _plant(summary)
    planted["verdict"] = "fail"
    (folder / "summary.json").write_text(json.dumps(planted))
    records = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    for r in records:
        for key in (
            "request_id",
            "pod",
            "version",
            "error",
            "model",
            "finish_reason",
            "content_type",
        ):
            r[key] = str(r.get(key)) + MARKUP
        r["tags"] = {MARKUP: MARKUP}
        # text in each of its text fields (a status is a number: not one to plant)
        r["gateway"] |= {k: MARKUP for k in ("request_id", "upstream_addr", "upstream_status")}
        r["gateway"] |= {"errors": [MARKUP], "flags": [MARKUP], "tried": [MARKUP]}
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    for e in events:
        e["pod"], e["node"], e["version"] = (
            str(e.get(k)) + MARKUP for k in ("pod", "node", "version")
        )
        e["detail"] = {MARKUP: MARKUP, "action": MARKUP}
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    make_run(session / "y' onmouseover='window.__pwned=1", 10, 0, "pass")  # counts intact
    pages = [write_report(folder), write_index(session)]
    from harness.report.compare import write_history

    pages.append(write_history(tmp_path)[0])
    for page in pages:
        seen = browser_check(page, tmp_path / "shot.png", "?")
        assert seen["planted"] == 0 and seen["scripts"] == 0 and not seen["pwned"], (page, seen)
        assert seen["js_links"] == 0, (page, seen)
    index = pages[1].read_text()
    assert "Runs passed over (1)" in index  # the planted counts cannot be summed: listed
    assert browser_check(pages[1], tmp_path / "shot.png", "?")["links"] == 1  # the clean run


@pytest.mark.unit
def test_every_link_between_the_pages_leads_to_a_page(tmp_path):
    """A reviewer moves index -> report -> back, index <-> history, history -> a night's
    page, each report and the last two nights compared: every href of every page leads to
    a file that is there, and a run that ended before its report (SKIPPED) is not linked."""
    from harness.preconditions import write_unjudged
    from harness.report.compare import write_history

    reports = tmp_path / "reports"
    nights = []
    for night in ("20261203-020000-kube", "20261204-020000-kube"):
        session = make_session(reports / night, {"test_drain[pod]": ("pass", 1.0, 1.0)})
        skipped = session / "test_drain_node"
        skipped.mkdir()
        write_unjudged(skipped, "drain", "test_drain[node]", "kube", "RBAC: not allowed")
        write_index(session)
        nights.append(session)
    history, _ = write_history(reports)
    assert "href='compare-latest.html'" in history.read_text()  # the last two nights
    pages = [history, reports / "compare-latest.html"] + [n / "index.html" for n in nights]
    pages += [p for n in nights for p in n.glob("*/report.html")]
    seen = 0
    for page in pages:
        for href in re.findall(r"href='([^'#]+)'", page.read_text()):
            target = (page.parent / unquote(href)).resolve()
            assert target.is_file(), f"{page.relative_to(tmp_path)} links to {href}: not there"
            seen += 1
    assert seen >= 2 + 2 * 2 + 2 * 2  # history: 2 nights, 2 reports; each index: history, report
    index = (nights[0] / "index.html").read_text()
    assert "../history.html" in index and "test_drain[node]</td>" in index
    report = next(nights[0].glob("*/report.html")).read_text()
    assert "href='../index.html'" in report and "href='../../history.html'" in report


@pytest.mark.unit
def test_a_report_leaks_no_none_no_empty_unit_and_no_dict_repr(tmp_path):
    """The placeholders a reviewer met: "over None s", "ITL SLO None s", "1x None", a
    check's observed value as a Python dict; from a run whose ITL SLO is not set and whose
    drained pod's /health once gave no answer."""
    folder = make_run(tmp_path / "run", 20, 0, "pass")
    s = json.loads((folder / "summary.json").read_text())
    s.setdefault("config", {})["slo"] = {"ttft_s": 1.5, "itl_s": None}
    s["slo"] = {"ttft_s": 1.5, "itl_s": None, "budgets": {"ttft": {"before": 0.01}}}
    phase = {"requests": 10, "ttft_slo_breach": 0, "missing_done": 0, "truncated": 0}
    s["signals"] = {"before": phase | {"gateway_499": None}}
    s["health_during_drain"] = {"200": 3, "None": 1}
    s["checks"] = [
        {"name": "ttft_slo_budget", "status": "pass", "passed": True,
         "observed": {"before": "0 of 11 (0.0%)", "during": "0 of 16 (0.0%)"},
         "expected": {"before": "<= 1% over 1.5 s"}, "population": "27 requests",
         "requests": []},
        {"name": "itl_slo_budget", "status": "skipped", "passed": False,
         "observed": "not judged", "expected": "an SLO to judge by",
         "reason": "slo.itl_s is not set", "requests": None},
    ]  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(s))
    text = re.sub(r"<[^>]+>", " ", write_report(folder).read_text())
    for leak in ("None", " s.", "{'", "null"):
        assert leak not in text.replace("None of", ""), (leak, text[text.find(leak) - 80 :][:160])
    assert "before: 0 of 11 (0.0%); during: 0 of 16 (0.0%)" in text
    from harness.report.html import _slo_text, check_text

    assert _slo_text({"ttft_s": 1.5, "itl_s": None}) == "TTFT SLO 1.5 s, no ITL SLO"
    assert check_text({"499": 0, "502": None}) == "499: 0; 502: –"
    assert check_text(None) == "–" and check_text([]) == "–"


@pytest.mark.unit
def test_the_verdict_says_why_in_one_sentence():
    from harness.report.html import verdict_sentence

    fail = {
        "verdict": "fail",
        "checks": [
            {"name": "no_broken_streams", "status": "fail", "observed": "2 of 39",
             "expected": "0 of 39"},
            {"name": "recovery_time", "status": "pass", "observed": "3.2 s"},
        ],
    }  # fmt: skip
    assert verdict_sentence(fail) == (
        "FAIL because of no_broken_streams: 2 of 39 (expected 0 of 39)."
    )
    passed = {
        "verdict": "pass",
        "goodput": {"all": {"share": 0.901}},
        "checks": [
            {"name": "ttft_slo_budget", "status": "pass",
             "observed": {"during": "4 of 40 (10.0%)"}, "expected": {"during": "<= 25% over 1 s"}},
            {"name": "itl_slo_budget", "status": "skipped", "observed": "not judged"},
        ],
    }  # fmt: skip
    said = verdict_sentence(passed)
    assert said.startswith("PASS: every one of the 1 checks that judged this run passed")
    assert (
        "goodput 90.1% is within the budgets: ttft_slo_budget (during: 4 of 40 (10.0%); "
        "allowed during: <= 25% over 1 s)" in said
    )
    unsure = {
        "verdict": "inconclusive",
        "checks": [
            {"name": "kill_seen", "status": "inconclusive", "reason": "the kill never showed"}
        ],
    }
    assert verdict_sentence(unsure) == "INCONCLUSIVE because of kill_seen: the kill never showed."


@pytest.mark.unit
def test_the_configuration_under_test_is_what_differs_from_the_defaults():
    from harness.config.schema import load_config
    from harness.report.summary import config_changes

    sets = ["engine.shutdown_timeout_s=0", "load.api_key_env=MY_KEY"]
    sets += [
        "load.max_tokens=[{tokens: 8, weight: 1}]",
        "weighted_canary.stable_selects_candidate=true",
    ]
    changes = config_changes(load_config(None, sets))
    assert "engine.shutdown_timeout_s: 8 -> 0" in changes, changes
    assert any(c.startswith("load.api_key_env:") for c in changes)
    # as the YAML says them, not Python's reprs of them
    assert "weighted_canary.stable_selects_candidate: false -> true" in changes
    assert any(c.endswith("-> [{tokens: 8, weight: 1}]") for c in changes), changes
    assert config_changes(load_config(None, [])) == []


@pytest.mark.unit
def test_every_action_line_on_the_timeline_carries_a_visible_label(tmp_path):
    page = write_report(make_run(tmp_path / "run", 20, 2, "fail")).read_text()
    lines = re.findall(r"<line [^>]*stroke=\"#d32f2f\"[^>]*><title>([^<]+)</title>", page)
    labels = re.findall(r"<text class=\"act\"[^>]*>([^<]+)</text>", page)
    assert lines and sorted(lines) == sorted(labels), (lines, labels)
    assert all(re.search(r"[+-]\d+\.\d\d s$", label) for label in labels)


@pytest.mark.unit
def test_the_close_up_spans_the_act_to_its_last_consequence_when_a_scaler_chose_the_pod():
    """scale_to_zero: the count is handed to the scaler at +0 s and the scaler removes the
    replica at +16 s; no victim is named by the harness. The close-up spanned -1 .. +6 s."""
    from harness.report.html import _zoom_window

    t = 1000.0
    events = [
        Event(t, "action", None, None, None, {"action": "autoscaler"}),
        Event(t + 15.5, "sigterm", "sim-v1-2", None, "v1", {}),
        Event(t + 16.0, "pod_removed", "sim-v1-2", None, "v1", {}),
    ]
    lo, hi = _zoom_window({"t_act": t, "victims": [], "t_end": t + 40}, [], events)
    assert lo <= t - 1 and hi >= t + 16
    # with a victim named, only its own events count
    lo, hi = _zoom_window({"t_act": t, "victims": ["sim-v1-1"], "t_end": t + 40}, [], events)
    assert hi < t + 10


@pytest.mark.unit
def test_expected_text_missing_on_both_sides_under_a_pass_is_explained():
    from harness.report.html import _profile_note

    note = _profile_note({"mode": "same"}, {"expected_missing": 5}, {"expected_missing": 5})
    assert "missing 5 times in the canary's answers and 5 in the baseline's" in note
    assert "the baseline's answer had and the canary's lost counts against" in note
    assert _profile_note({"mode": "same"}, {"expected_missing": 0}, {"expected_missing": 0}) == ""


@pytest.mark.unit
def test_the_close_ups_bars_are_grouped_by_pod_and_the_victim_is_marked(tmp_path):
    folder = make_run(tmp_path / "run", 40, 4, "fail")
    s = json.loads((folder / "summary.json").read_text())
    pods = sorted({json.loads(line)["pod"] for line in (folder / "records.jsonl").open()})
    s["victims"] = [pods[0]]
    (folder / "summary.json").write_text(json.dumps(s))
    page = write_report(folder).read_text()
    zoom = page[page.index('<svg id="zoom"') :]
    zoom = zoom[: zoom.index("</svg>")]
    groups = re.findall(r'<text class="pod"[^>]*>([^<]+)</text>', zoom)
    victims = [g for g in groups if g.endswith("◀ victim")]
    assert len(groups) >= 2 and len(victims) == 1, groups
    assert len(set(groups)) == len(groups)  # each pod named once: its streams together


@pytest.mark.unit
def test_a_failed_check_reads_as_a_sentence():
    from harness.report.html import check_sentence

    c = {
        "name": "ttft_slo_budget", "status": "fail",
        "observed": {"during": "9 of 20 (45.0%)"}, "expected": {"during": "<= 25% over 1 s"},
        "population": "60 requests in before, during, after",
        "requests": ["r1", "r2", "r3", "r4", "r5"],
    }  # fmt: skip
    assert check_sentence(c) == (
        "judged 60 requests in before, during, after, it saw during: 9 of 20 (45.0%) where "
        "during: <= 25% over 1 s was expected; broken: r1, r2, r3 and 2 more (in the table "
        "below)."
    )
    unsure = {"name": "kill_seen", "status": "inconclusive", "reason": "the kill never showed"}
    assert check_sentence(unsure) == "no evidence either way: the kill never showed."
