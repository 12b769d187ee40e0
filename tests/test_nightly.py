"""The nightly's plan (harness/nightly.py): seven nights with literal estimates cover every
scenario and never start one whose worst case passes the deadline; and a session run
with --fit-deadline that leaves its runs for another night says so in its output, its
JUnit XML and its index."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness import nightly
from harness.nightly import Night, fits, last_runs, night_order

ROOT = Path(__file__).resolve().parents[1]

# Worst cases (s) shaped like the GPU profile's eleven runs: long rollouts, short kills.
WORST = {
    "test_rollout_1_0": 5400.0,
    "test_rollout_2_1": 4200.0,
    "test_rollout_blue-green": 6000.0,
    "test_drain_pod": 2400.0,
    "test_drain_node": 2700.0,
    "test_scale_to_zero": 2100.0,
    "test_pod_kill": 1500.0,
    "test_scale_up": 1800.0,
    "test_canary": 3600.0,
    "test_startup": 3000.0,
    "test_scale_down": 2000.0,
}
NAMES = list(WORST)
DEADLINE = 3 * 3600.0


def night_of(number: int, history: dict[str, str], used_per_run) -> Night:
    night = Night(DEADLINE, "literal", nightly.RESTORE_S, number, [], dict(WORST))
    night.order = night_order(NAMES, history, number)
    used = 0.0
    for name in night.order:  # as pytest_runtest_setup asks before each run
        if night.may_start(name, used) is None:
            used += used_per_run(name)
    return night


@pytest.mark.unit
@pytest.mark.parametrize("pace", ["worst", "typical"])
def test_seven_nights_cover_every_scenario_and_never_start_one_past_the_deadline(pace):
    history: dict[str, str] = {}
    ran_on: dict[str, int] = {}
    # a night at the worst case uses every run's worst; a typical one a third of it
    share = 1.0 if pace == "worst" else 1 / 3
    for number in range(20000, 20007):
        night = night_of(number, history, lambda n: WORST[n] * share)
        used = 0.0
        for name in night.started:
            # never started one whose worst case and the restore pass the deadline
            assert used + WORST[name] + nightly.RESTORE_S <= DEADLINE, (number, name, used)
            used += WORST[name] * share
        # the night stopped at the first run that did not fit: every later one is left
        left = [x["name"] for x in night.left]
        assert night.started + left == night.order
        assert all("deadline" in x["why"] or "stopped" in x["why"] for x in night.left)
        for name in night.started:
            history[name] = f"{number}-000000-kube"
            ran_on.setdefault(name, number)
    assert set(ran_on) == set(NAMES), f"never ran within a week: {set(NAMES) - set(ran_on)}"


@pytest.mark.unit
def test_without_history_the_rotation_puts_each_scenario_first_in_turn():
    firsts = {night_order(NAMES, {}, n)[0] for n in range(len(NAMES))}
    assert firsts == set(NAMES)
    # the one not seen for longest comes first, whatever the rotation says
    history = {n: "20261201-020000-kube" for n in NAMES}
    history["test_canary"] = "20261120-020000-kube"
    del history["test_pod_kill"]
    order = night_order(NAMES, history, 3)
    assert order[:2] == ["test_pod_kill", "test_canary"]


@pytest.mark.unit
def test_fits_keeps_the_restore_inside_the_deadline():
    assert fits(0, 100, 160, 60)
    assert not fits(0.5, 100, 160, 60)
    night = Night(160.0, "literal", 60.0, 0, ["a", "b"], {"a": 90.0, "b": 11.0})
    assert night.planned() == (["a"], ["b"])
    assert night.may_start("a", 0.0) is None
    why = night.may_start("b", 95.0)
    assert why is not None and "would pass the deadline" in why, why
    assert night.may_start("b", 0.0) is not None  # stopped: nothing more starts tonight


@pytest.mark.unit
def test_last_runs_reads_only_sessions_that_ran_to_a_verdict(tmp_path):
    for session, run, verdict in [
        ("20261201-020000-kube", "test_canary", "pass"),
        ("20261202-020000-kube", "test_canary", "skipped"),
        ("20261202-020000-kube", "test_pod_kill", "fail"),
        ("not-a-session", "test_drain_pod", "pass"),
    ]:
        folder = tmp_path / session / run
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps({"verdict": verdict}))
    assert last_runs(tmp_path) == {
        "test_canary": "20261201-020000-kube",
        "test_pod_kill": "20261202-020000-kube",
    }


@pytest.mark.process
def test_a_night_that_cannot_fit_a_run_leaves_each_for_another_night_and_says_why(tmp_path):
    junit = tmp_path / "junit.xml"
    args = [sys.executable, "-m", "pytest", "scenarios", "-k", "drain or pod_kill"]
    args += ["--reports-dir", str(tmp_path), "-p", "no:cacheprovider", "--fit-deadline"]
    args += ["--deadline-s", "90", f"--junitxml={junit}"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    # (-k drain selects pd_prefill's drain too)
    assert "rollcheck: night plan: by the worst cases 0 of 4 runs fit: none" in out, out
    assert "left for another night" in out
    (session,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    night = json.loads((session / "night.json").read_text())
    assert night["started"] == [] and len(night["left"]) == 4
    assert "would pass the deadline" in night["left"][0]["why"]
    index = (session / "index.html").read_text()
    assert "left for another night" in index and "SKIPPED" in index
    cases = ET.parse(junit).getroot().iter("testcase")
    skipped = [c.find("skipped").get("message") for c in cases if c.find("skipped") is not None]
    assert len(skipped) == 4 and all("left for another night" in m for m in skipped), skipped


@pytest.mark.unit
def test_a_run_cut_by_a_signal_says_so_and_the_night_stays_readable(tmp_path):
    """A Job killed at its deadline: the run it was in has records and events but no
    verdict; it is INCONCLUSIVE with why, and the index and the history read it."""
    from harness.pytest_plugin import _interrupted_runs
    from harness.report.compare import write_history
    from harness.report.html import write_index

    session = tmp_path / "20261205-020000-kube"
    done, cut = session / "test_drain_pod", session / "test_rollout_blue-green"
    for folder in (done, cut):
        folder.mkdir(parents=True)
        (folder / "events.jsonl").write_text("")
    (done / "summary.json").write_text(
        json.dumps({"scenario": "drain", "name": "test_drain[pod]", "verdict": "skipped",
                    "reason": "r", "requests": 0, "outcomes": {}, "checks": []})
    )  # fmt: skip
    _interrupted_runs(session)
    s = json.loads((cut / "summary.json").read_text())
    assert s["verdict"] == "inconclusive" and "interrupted" in s["reason"]
    assert json.loads((done / "summary.json").read_text())["verdict"] == "skipped"
    page = write_index(session).read_text()
    assert "INCONCLUSIVE" in page and "test_rollout_blue-green" in page
    history, _ = write_history(tmp_path)
    assert "inconclusive" in Path(history).read_text().lower()
