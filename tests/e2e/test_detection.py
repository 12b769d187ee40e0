"""Each scenario, run as a user runs it, catches its misconfiguration, and passes without it.

Every case is `pytest scenarios -k ... --set ...` in a subprocess against the local
target; the verdict is read back from the run folder's summary.json.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest

from tests.scenario_runs import run_scenarios
from tests.test_report import CHROMIUM, browser_check

LONG = "load.max_tokens=[{tokens: 200}]"  # every answer ~4 s: streams surely in flight
SHORT_ANSWERS = "load.max_tokens=[{tokens: 8}]"  # ~0.2 s each: many streams a second
CANARY = "canary and not weighted"  # -k canary selects weighted_canary too


def failed_checks(summary: dict) -> set[str]:
    return {c["name"] for c in summary["checks"] if not c["passed"]}


CASES = [
    # (id, -k, sets, outcomes that must appear, checks that must fail)
    (
        # vLLM 0.32's default: the engine core is stopped at SIGTERM; streams get the
        # EngineCore error event, hang or end abort + [DONE] (a race, seeded per pod)
        "drain-vllm-default",
        "drain and pod",
        ["engine.shutdown_timeout_s=0", LONG],
        {"error_event", "hung", "aborted"},
        {"in_flight_streams_finish", "no_broken_streams"},
    ),
    *[
        (
            f"drain-vllm-default-{mode}",
            "drain and pod",
            ["engine.shutdown_timeout_s=0", f"engine.shutdown_mode={mode}", LONG],
            {outcome},
            {"in_flight_streams_finish"},
        )
        for mode, outcome in (("error_event", "error_event"), ("abort", "aborted"))
    ],
    (
        "drain-legacy-engine",
        "drain and pod",
        ["engine.shutdown_timeout_s=0", "engine.shutdown_mode=legacy", LONG],
        {"truncated", "reset"},
        {"in_flight_streams_finish"},
    ),
    (
        "drain-hang",
        "drain and pod",
        ["engine.shutdown_timeout_s=0", "engine.shutdown_mode=hang", LONG],
        {"hung"},
        {"no_hung_streams", "in_flight_streams_finish"},
    ),
    (
        # 0.2 s between SIGTERM (after the 1 s preStop) and SIGKILL, answers of ~8 s: a
        # stream in flight finishing in that window is rare (2.5% each, two in flight)
        "drain-grace-too-short",
        "drain and pod",
        ["pod.termination_grace_s=1.2", "load.max_tokens=[{tokens: 400}]"],
        {"reset"},
        {"in_flight_streams_finish", "gateway_clean"},
    ),
    (
        "drain-no-prestop-slow-gateway",
        "drain and pod",
        # the teardown keeps the draining pod answering (500) for the whole 2 s the gateway
        # still routes to it: with 0.5 s, a drain of short answers ended within a second,
        # the gateway retried the refused connects elsewhere, and nothing showed (CI, once).
        # Answers of 1.2 s, so every user sends in those 2 s: with the default mix, all six
        # users once held 3 s answers through the window and no request reached the pod
        [
            "pod.prestop_s=0",
            "gateway.endpoint_delay_s=2",
            "engine.shutdown_teardown_s=3",
            "load.max_tokens=[{tokens: 60}]",
        ],
        {"http_error"},  # vLLM 0.32: 500 'cannot schedule new futures after shutdown'
        {"no_abort_after_sigterm"},
    ),
    (
        "rollout-vllm-default",
        "rollout and surge1",
        ["engine.shutdown_timeout_s=0", LONG],
        {"error_event", "hung", "aborted"},
        {"no_broken_streams"},
    ),
    (
        "scale-to-zero-rate-scaler",
        "scale_to_zero",
        ["autoscaler.policy=rate"],
        # the answer outlived the drain and was cut at its deadline: the error event, a
        # hang the client notices, abort + [DONE], or, when SIGKILL at the grace period
        # comes first, a reset
        {"error_event", "hung", "aborted", "reset"},
        {"long_answer_finishes"},
    ),
    (
        "pod-kill-frozen-node",
        "pod_kill",
        ["scenario.kill_signal=SIGSTOP", LONG],
        {"hung"},
        {"killed_streams_fail_fast", "no_hung_streams"},
    ),
    (
        # a scaler blind to in-flight answers removes the busy replica; the drain is short
        "scale-down-blind-scaler",
        "scale_down",
        ["autoscaler.policy=rate"],
        {"error_event", "hung", "aborted", "reset"},
        {"long_answer_survives_scale_down"},
    ),
    (
        # one replica, and a gateway that learns of its death 3 s late: every request in
        # between reaches the dead pod (502); only the streams the kill cut are exempt
        "pod-kill-single-replica-slow-gateway",
        "pod_kill",
        ["replicas=1", "pdb.min_available=null", "gateway.endpoint_delay_s=3"],
        {"http_error"},
        {"other_pods_untouched", "gateway_clean"},
    ),
    (
        # each stream holds 200 MB per 1000 tokens of context (about 54 MB at 270 tokens)
        # under a 240 MB limit: three fit beside the engine's own 40 MB, four do not; once
        # the act's request OOMKills one engine, its load crosses the others' limit
        "oom-load-crosses-the-limit",
        "oom_kill",
        [
            "engine.memory_mb_per_1k_tokens=200",
            "pod.memory_limit_mb=240",
            "load.users=8",
            "scenario.oom_context_tokens=2000",
            "scenario.recovery_s=15",
            LONG,
        ],
        {"reset"},
        {"oom_killed_once"},
    ),
    (
        # nginx's own way with a replica that answers nothing: every one tried in turn
        # (round robin, no passive health checks), each new request's connect given 1 s,
        # until the node controller marks the node (node_monitor_grace_s, 12 s: past the
        # 10 s budget); the well-configured gateway leaves the lost replica out after one
        # failed connect
        "node-loss-gateway-keeps-trying",
        "node_loss",
        ["gateway.max_fails=0", "gateway.balance=round_robin"],
        set(),
        {"lost_node_routing"},
    ),
    (
        # the act's request sent again twice to the engine that came back, as a client
        # retries one that got no answer: it kills each restarted engine
        "oom-retried-poison-request",
        "oom_kill",
        ["scenario.oom_retries=2"],
        {"reset"},
        {"oom_killed_once"},
    ),
    (
        # the new version reloaded in place under the adapter's one name, on an engine that
        # keeps the weights it has for that adapter: the golden prompts answer as before
        "adapter-same-name-reload-keeps-old-weights",
        "adapter_rollout",
        ["adapter.versioned=false", "engine.stale_lora_reload=true"],
        set(),
        {"adapter_answers"},
    ),
    (
        # the old version unloaded while half the adapter's requests still name it: each
        # gets the engine's 404 "does not exist"
        "adapter-unloaded-while-in-the-mix",
        "adapter_rollout",
        ["adapter.steps=[10, 50]"],
        {"http_error"},
        {"adapter_unload_clean"},
    ),
    (
        # a candidate three times slower to its first token than the baseline: the first
        # step (10%) fails against the baseline's streams in it, and rolls back there
        # (short answers: enough of the candidate's streams in a few seconds)
        "weighted-canary-slow-candidate-rolled-back-at-the-first-step",
        "weighted_canary",
        # (the baseline's TTFT 200 ms, the candidate's 600: a gap far above a busy CI
        # machine's client delay, which the final check discounts)
        ["engine.ttft_s=0.2", "weighted_canary.engine.ttft_s=0.6", SHORT_ANSWERS],
        set(),
        {"weighted_candidate"},
    ),
    (
        # the stable backend selects the candidate's pods too (its Service selects by app
        # label alone): at 10% the candidate serves about a third of the requests
        "weighted-canary-split-far-off-its-weight",
        "weighted_canary",
        [
            "weighted_canary.stable_selects_candidate=true",
            "weighted_canary.step_s=6",
            SHORT_ANSWERS,
        ],
        set(),
        {"weighted_split"},
    ),
    (
        # a candidate that fails a third of what it is sent: the mirrored requests it
        # answered 503 are named from the gateway's log of each
        "shadow-candidate-errors-on-mirrored-requests",
        "shadow",
        ["shadow.engine.fault_http_error_rate=0.3"],
        set(),
        {"shadow_served"},
    ),
    (
        # the Service users reach selects the candidate's pods too: users get its answers
        "shadow-leaks-the-candidates-answers-to-users",
        "shadow",
        ["shadow.stable_selects_candidate=true"],
        set(),
        {"shadow_not_leaked"},
    ),
    (
        "scale-up-slow-start",
        "scale_up",
        ["engine.startup_s=12", "scenario.recovery_s=6"],
        set(),
        {"ttft_recovers_after_step"},
    ),
]


@pytest.mark.parametrize(
    "select, sets, outcomes, checks", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_misconfiguration_is_caught(tmp_path, select, sets, outcomes, checks):
    proc, summaries = run_scenarios(tmp_path, select, *sets)
    if select == "weighted_canary":  # rolled back at the first step, the rest not run
        (summary,) = summaries
        assert summary["weighted_canary"]["action"] == "rolled back at 10%", summary
        assert [s["percent"] for s in summary["weighted_canary"]["steps"]] == [10]
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(summaries) == 1
    summary = summaries[0]
    assert summary["verdict"] == "fail"
    seen = {k for k, v in summary["outcomes"].items() if v}
    if outcomes:
        assert seen & outcomes, f"expected one of {outcomes}, got {summary['outcomes']}"
    assert checks <= failed_checks(summary), summary["checks"]
    # the accounting invariant holds even when streams break
    assert summary["checks"][0]["name"] == "accounting" and summary["checks"][0]["passed"]
    # the pytest failure is the short account, with the hint, not a traceback
    assert "verdict FAIL" in proc.stdout and "hint:" in proc.stdout
    assert "Traceback" not in proc.stdout


@pytest.fixture(scope="module")
def healthy_night(tmp_path_factory):
    """Every scenario against a well-configured local target, once for this module."""
    reports = tmp_path_factory.mktemp("healthy")
    proc, summaries = run_scenarios(
        reports,
        "drain or rollout or scale_to_zero or pod_kill or oom_kill or scale_up or canary "
        # (rollout: adapter_rollout and pd_rollout's three orders too; drain: pd_prefill's)
        "or startup or scale_down or node_loss or shadow or pd_prefill",
    )
    return reports, proc, summaries


def test_well_configured_deployment_passes_every_scenario(healthy_night):
    tmp_path, proc, summaries = healthy_night
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(summaries) == 22
    for s in summaries:
        assert s["verdict"] == "pass", (s["name"], failed_checks(s))
        # the headline figure; a load step queues by design until replicas start, and a
        # killed pod's own streams fail by design
        assert 0 < s["goodput"]["all"]["share"] <= 1, s["goodput"]
        if s["scenario"] not in ("scale_up", "pod_kill", "oom_kill"):
            assert s["goodput"]["all"]["share"] > 0.9, s["goodput"]
        assert s["attribution"]["traced"] == s["requests"]  # the local gateway traces all
        kept = {"complete", "cancelled"}
        # a killed pod's own streams fail; a lost node's hang until the client gives up
        if s["scenario"] not in ("pod_kill", "oom_kill", "node_loss"):
            assert all(v == 0 for k, v in s["outcomes"].items() if k not in kept), s["outcomes"]
    index = next(tmp_path.glob("*/index.html"))
    assert index.exists()
    canary = next(s for s in summaries if s["scenario"] == "canary")["canary"]
    assert canary["action"] == "promoted" and canary["agreement"] == 1.0
    assert canary["candidate_pods_serving"] == [canary["candidate_pod"]]
    weighted = next(s for s in summaries if s["scenario"] == "weighted_canary")
    assert weighted["weighted_canary"]["action"] == "promoted"
    assert [s["percent"] for s in weighted["weighted_canary"]["steps"]] == [10, 50, 100]
    shadow = next(s for s in summaries if s["scenario"] == "shadow")["shadow"]
    assert shadow["mirrored"] and set(shadow["candidate_finished"]) <= {"stop", "length"}
    # revision-aware P/D (the control): every order's answers are one version's own, and
    # the decode pods did refuse the other version's KVs (recomputed) on the way
    pd = [s["pd_rollout"] for s in summaries if s["scenario"] == "pd_rollout"]
    assert sorted(p["order"] for p in pd) == ["decode_first", "prefill_first", "together"]
    assert all(p["summary"]["mixed"] == 0 and p["summary"]["counts"].get("v2") for p in pd)
    assert any(a["kv"] == "recomputed" for p in pd for a in p["answers"])
    # the prefill role disrupted: decode pods were waiting on it, and none passed a failed
    # prefill on (a kill's and the role's absence's were prefilled on the decode)
    prefill = {s["pd_prefill"]["act"]: s["pd_prefill"] for s in summaries if "pd_prefill" in s}
    assert sorted(prefill) == ["drain", "kill", "to_zero"]
    assert all(p["waiting"] and p["decode_view"]["passed_on"] == 0 for p in prefill.values())
    assert prefill["to_zero"]["decode_view"]["fallback"] > 0


# what no page a reviewer reads may show: a placeholder, a repr, a unit without its number
LEAK = re.compile(
    r"\bNone\b|\bnull\b|\bundefined\b|\bNaN\b|\bTrue\b|\bFalse\b|\{'|\[\]|\{\}"
    r"|(?<![\d–])\s(?:s|ms|%)(?=[\s.,;)]|$)"
)


@pytest.mark.skipif(
    not os.path.exists(CHROMIUM),
    reason="chromium is not installed (scripts/run test installs it as root)",
)
def test_every_page_of_a_night_reads_in_chromium(healthy_night, tmp_path):
    """A reviewer opens the index, every scenario's report and the history in Chromium:
    every vertical line of a timeline carries a visible label, no placeholder or repr in
    the visible text, every link (index -> report -> back, index <-> history) leads to a
    page when followed, and the close-up reaches the act's last consequence (for
    scale_to_zero, the removal of the last replica, 16 s after the act)."""
    reports, _, summaries = healthy_night
    session = next(reports.glob("*/index.html")).parent
    pages = [session / "index.html", reports / "history.html"]
    pages += sorted(session.glob("*/report.html"))
    assert len(pages) == 2 + len(summaries) == 24
    for page in pages:
        seen = browser_check(page, tmp_path / "page.png", "review")
        where = page.relative_to(reports)
        assert seen["errors"] == [], (where, seen["errors"])
        assert seen["unlabelled"] == [], (where, seen["unlabelled"])
        leaks = [
            seen["text"][max(0, m.start() - 40) : m.end() + 20] for m in LEAK.finditer(seen["text"])
        ]
        assert leaks == [], (where, leaks)
        assert seen["hrefs"] and seen["broken_links"] == [], (where, seen["broken_links"])
        if page.name == "report.html":
            assert seen["lines"] >= 2, where  # at least the act and a pod's signal
            assert f"file://{session}/index.html" in seen["hrefs"], where  # back
        if page.name == "index.html":
            assert f"file://{reports}/history.html" in seen["hrefs"]
    # scale_to_zero's close-up spans the act to the last replica's removal
    run = next(session.glob("test_scale_to_zero/summary.json")).parent
    t_act = json.loads((run / "summary.json").read_text())["t_act"]
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    removed = max(e["t"] for e in events if e["kind"] == "pod_removed" and e["t"] > t_act)
    assert removed - t_act > 10  # the scaler's idle time: well after the act
    zoom = browser_check(run / "report.html", tmp_path / "zoom.png", "review")["zoom"]
    lo, hi = map(float, re.findall(r"([-+][\d.]+) s", zoom))
    assert lo <= 0 and hi >= removed - t_act, (zoom, removed - t_act)


def test_a_drain_as_long_as_the_answer_survives_a_blind_scale_down(tmp_path):
    """The other way out: the scaler removes the busy replica, and the drain covers it."""
    proc, (summary,) = run_scenarios(
        tmp_path,
        "scale_down",
        "autoscaler.policy=rate",
        "engine.shutdown_timeout_s=30",
        "pod.termination_grace_s=35",
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    (check,) = [c for c in summary["checks"] if c["name"] == "long_answer_survives_scale_down"]
    assert check["status"] == "pass" and check["observed"] == "0 of 1"  # none broken
    assert summary["victims"] and summary["outcomes"]["complete"] == 1


def test_the_startup_verdict_names_the_restarts_probe_and_arithmetic(tmp_path):
    """The kubelet's liveness probe kills an engine still loading its weights."""
    # liveness gives up after 1.5 s, the new version needs 4 s: a wide margin, on a busy
    # machine too, so the engine never wins the race and the crash loop is certain
    proc, (summary,) = run_scenarios(
        tmp_path, "startup", "pod.startup_probe=null", "pod.liveness_probe.period_s=0.5"
    )
    assert proc.returncode == 1 and "hint:" in proc.stdout and "Traceback" not in proc.stdout
    (check,) = [c for c in summary["checks"] if c["name"] == "starts_without_restarts"]
    assert check["status"] == "fail" and "liveness probe" in check["observed"]
    assert "start-up 4 s > liveness 3 x 0.5 s = 1.5 s" in check["hint"], check["hint"]
    assert "no startupProbe" in check["hint"] and "Add a startupProbe" in check["hint"]
    actions = [e for e in summary_actions(tmp_path) if e.get("action") == "rollout"]
    assert [a["to_version"] for a in actions] == ["v2", "v1"]  # the crash loop rolled back


@pytest.mark.parametrize("mode", ["same"])  # new weights: tests/test_canary.py, real processes
def test_a_degraded_canary_is_caught_and_rolled_back(tmp_path, mode):
    """A bad model answers 200 at normal speed with healthy probes: every stream completes,
    and only the comparison of its answers with the baseline's fails it."""
    proc, (summary,) = run_scenarios(
        tmp_path, CANARY, "canary.engine.degraded=true", f"canary.mode={mode}"
    )
    assert proc.returncode == 1 and "FAILED canary_answers" in proc.stdout, proc.stdout[-2000:]
    failed = {c["name"] for c in summary["checks"] if c["status"] == "fail"}
    assert failed == {"canary_answers"}  # the streams themselves were fine
    assert summary["outcomes"]["complete"] == summary["requests"]
    c = summary["canary"]
    assert c["action"] == "rolled back" and c["status"] == "fail"
    worst = c["worst"][0]
    assert worst["baseline"] and worst["candidate"] and worst["baseline"] != worst["candidate"]
    actions = summary_actions(tmp_path)
    rollouts = [e for e in actions if e.get("action") == "rollout"]
    assert [(r["to_version"], r.get("canary")) for r in rollouts] == [("v2", True)]
    assert [e["action"] for e in actions if e["action"].startswith("canary_")] == [
        "canary_rollback"  # the baseline's template back
    ]
    # one candidate pod served while its answers were compared: the rollout held there
    assert c["candidate_pods_serving"] == [c["candidate_pod"]], c["candidate_pods_serving"]
    page = next(tmp_path.glob("*/*/report.html")).read_text()
    assert "Canary answers: FAIL, rolled back" in page and html.escape(worst["differed"]) in page
    assert "Candidate pods serving while the answers were compared: <b>1</b>" in page


def summary_actions(reports: Path) -> list[dict]:
    events = next(reports.glob("*/*/events.jsonl")).read_text().splitlines()
    return [e["detail"] for e in map(json.loads, events) if e["kind"] == "action"]


def test_a_run_without_its_steady_state_is_inconclusive_everywhere(tmp_path):
    """No evidence, no pass: streams never reach the in-flight count the drain needs."""
    junit = tmp_path / "junit.xml"
    proc, summaries = run_scenarios(
        tmp_path / "reports",
        "drain and pod",
        "scenario.in_flight=40",
        "scenario.steady_state_s=2",
        options=("--junitxml", str(junit)),
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    (summary,) = summaries
    assert summary["verdict"] == "inconclusive"
    (check,) = [c for c in summary["checks"] if c["status"] == "inconclusive"]
    assert check["name"] == "steady_state" and "40 streams in flight" in check["reason"]
    assert "verdict INCONCLUSIVE" in proc.stdout and "Traceback" not in proc.stdout
    assert "scenario.in_flight" in proc.stdout  # what to change
    run = next((tmp_path / "reports").glob("*/*/report.html"))
    assert ">INCONCLUSIVE<" in run.read_text()
    assert ">INCONCLUSIVE<" in next((tmp_path / "reports").glob("*/index.html")).read_text()
    assert "verdict INCONCLUSIVE" in junit.read_text()


def test_a_killed_pod_recovers_when_its_replacement_serves(tmp_path):
    """Recovery runs from the kill until the target shows a replacement ready and serving:
    with the engine restarted 8 s after the kill, it cannot be under 8 s (it was 0.51 s,
    read from a view of the pods from before the kill was seen)."""
    proc, (summary,) = run_scenarios(tmp_path, "pod_kill", "pod.restart_backoff_s=8")
    assert proc.returncode == 0, proc.stdout[-2000:]
    (check,) = [c for c in summary["checks"] if c["name"] == "recovery_time"]
    assert check["status"] == "pass" and float(check["observed"].split()[0]) >= 8, check
    assert "the engine seen dead (exited) at +0.0" in check["population"], check
    acts = [a["action"] for a in summary_actions(tmp_path)]
    assert acts.index("kill") < acts.index("kill_seen") < acts.index("replacement_served")


def test_a_drain_whose_answers_end_during_prestop_is_not_evidence(tmp_path):
    """Answers of 0.6-3 s behind a 5 s preStop end before SIGTERM: vLLM's default drain of
    0 s never meets a stream, so the run shows nothing about it (it PASSed, counting the
    streams in flight at the eviction)."""
    proc, (summary,) = run_scenarios(
        tmp_path,
        "drain and pod",
        "pod.prestop_s=5",
        "pod.termination_grace_s=20",
        "engine.shutdown_timeout_s=0",
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert summary["verdict"] == "inconclusive", summary["checks"]
    (check,) = [c for c in summary["checks"] if c["name"] == "in_flight_streams_finish"]
    assert check["status"] == "inconclusive" and "ended during preStop" in check["reason"]
    assert "load.max_tokens" in proc.stdout


def test_an_answer_that_ends_before_the_scaler_acts_is_not_evidence(tmp_path):
    """A 2 s answer ends about 1 s after a request-rate scaler takes over, before it acts
    (autoscaler.idle_s = 2 s): nothing met the scaler (it PASSed)."""
    proc, (summary,) = run_scenarios(
        tmp_path, "scale_to_zero", "autoscaler.policy=rate", "load.long_answer_tokens=100"
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert summary["verdict"] == "inconclusive", summary["checks"]
    (check,) = [c for c in summary["checks"] if c["name"] == "long_answer_finishes"]
    assert "before a scaler blind to it could act" in check["reason"]
    assert "raise load.long_answer_tokens" in proc.stdout


def test_a_candidate_that_is_the_baseline_is_a_config_error_before_acting(tmp_path):
    """A canary of the baseline's own version (with a degraded engine) was compared with
    the baseline pod itself, found by its version label: PASS, promoted, 8 of 8 identical."""
    proc, summaries = run_scenarios(
        tmp_path, CANARY, "canary.version=v1", "canary.engine.degraded=true"
    )
    assert proc.returncode != 0 and summaries == [], proc.stdout[-2000:]
    assert "canary.version is 'v1', the baseline's version (version)" in proc.stdout
    assert "Traceback" not in proc.stdout


def test_a_drain_cut_short_still_judges_the_streams_it_broke(tmp_path):
    """No ending hides a broken stream: the PDB refuses the node drain's second eviction
    (the first one's replacement needs 5 s to start, the drain retries for 1 s), and the
    first eviction broke its pod's streams (vLLM's default drain of 0 s). FAIL, saying
    what broke and why the scenario stopped; it was INCONCLUSIVE, blaming the PDB."""
    proc, (summary,) = run_scenarios(
        tmp_path,
        "drain and node",
        "nodes=2",
        "replicas=4",  # two pods on each of the two nodes
        "pdb.min_available=3",  # the first eviction leaves 3: the second must wait
        "scenario.eviction_retry_s=1",
        "engine.startup_s=5",
        "engine.shutdown_timeout_s=0",
        LONG,
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert summary["verdict"] == "fail", summary["checks"]
    status = {c["name"]: c for c in summary["checks"]}
    assert status["no_broken_streams"]["status"] == "fail"
    assert status["accounting"]["status"] == "pass"
    stopped = status["disruption"]
    assert stopped["status"] == "inconclusive" and "cut short after evicting" in stopped["reason"]
    assert "PodDisruptionBudget refused" in stopped["reason"]
    assert "verdict FAIL" in proc.stdout and "FAILED no_broken_streams" in proc.stdout
    assert "INCONCLUSIVE disruption: the disruption was cut short" in proc.stdout


AT_CAPACITY = ("load.users=12", "slo.ttft_s=0.5")  # 3 replicas x 4 sequences: no headroom


# the new pods of a rollout or a drain start in 3 s, not 0.5: with 0.5 s the dip in
# capacity lasts about a second (a drain's replacement was Ready 0.9 s after the eviction)
# and the breaches during it ranged 2.5-22% over seven rollouts and 20-28% over four drains
# beside two busy loops, while CI came out under the 5% budget once for each (2.5%, and 1
# of 25 for a drain); with 3 s the dip lasts 3.4-3.7 s and they ranged 14-27% (rollout)
# and 28-70% (drain). A pod kill's restart leaves it at 43-53% as it is.
SLOW_NEW_PODS = ("engine.startup_s=3",)


@pytest.mark.parametrize(
    "select, sets",
    [("drain and pod", SLOW_NEW_PODS), ("rollout and surge2", SLOW_NEW_PODS), ("pod_kill", ())],
    ids=["drain and pod", "rollout and surge2", "pod_kill"],
)
def test_losing_a_replica_at_capacity_breaks_the_ttft_budget(tmp_path, select, sets):
    """Every stream may complete and the scenario still fails: TTFT over its budget while
    one replica fewer than the load needs serves it; the phase and window are named."""
    proc, (summary,) = run_scenarios(tmp_path, select, *AT_CAPACITY, *sets)
    assert proc.returncode == 1 and summary["verdict"] == "fail"
    budget = next(c for c in summary["checks"] if c["name"] == "ttft_slo_budget")
    assert budget["status"] == "fail", summary["checks"]
    assert "budget broken during the disruption" in budget["hint"]
    assert summary["goodput"]["during"]["share"] < 1
    for phase in ("before", "during", "after"):
        assert set(summary["signals"][phase]) >= {"missing_done", "truncated", "gateway_499"}
    if select.startswith("rollout"):
        assert summary["outcomes"]["complete"] == summary["requests"]  # nothing broke


def test_a_rollout_the_nodes_cannot_hold_is_skipped_with_its_reason(tmp_path):
    """Blue-green with no spare GPUs would wait for its timeout; it is SKIPPED before it
    acts, and says why in the terminal, the index and JUnit (never a pass)."""
    junit = tmp_path / "junit.xml"
    proc, (summary,) = run_scenarios(
        tmp_path / "reports",
        "rollout and blue",
        "gpus_per_node=1",
        "nodes=3",
        options=("--junitxml", str(junit), "-rs"),
    )
    reason = "the rollout needs 3 free GPUs (3 surge pods x 1) and the schedulable nodes have 0"
    assert summary["verdict"] == "skipped" and reason in summary["reason"]
    assert "SKIPPED" in proc.stdout and reason in proc.stdout and "Traceback" not in proc.stdout
    assert "<skipped" in junit.read_text() and reason in junit.read_text()
    index = next((tmp_path / "reports").glob("*/index.html")).read_text()
    assert ">SKIPPED<" in index and html.escape(reason) in index
    assert summary["requests"] == 0  # nothing was started: no load, no action


def test_a_load_step_the_nodes_cannot_hold_is_skipped_with_its_reason(tmp_path):
    """The HPA would add 3 replicas for the step and there is 1 free GPU: SKIPPED before
    the load starts (it FAILed 'did not recover' after the whole recovery wait)."""
    proc, (summary,) = run_scenarios(
        tmp_path,
        "scale_up",
        "nodes=2",
        "gpus_per_node=1",
        "replicas=2",
        "pdb.min_available=1",
        options=("-rs",),
    )
    reason = "the load step needs 3 free GPUs (3 new replicas x 1) and the schedulable nodes have 1"
    assert summary["verdict"] == "skipped" and reason in summary["reason"], summary
    assert reason in proc.stdout and summary["requests"] == 0


def test_an_slo_this_machine_cannot_meet_is_said_before_acting(tmp_path):
    """slo.calibrate measures an engine before the first scenario: a --set SLO below the
    machine's unloaded TTFT is kept (and FAILs), and the user is told so before the
    scenario acts, in the terminal and the report."""
    proc, (summary,) = run_scenarios(
        tmp_path,
        "drain and pod",
        "slo.calibrate=always",
        "slo.ttft_s=0.001",
        "scenario.warm_requests=2",
    )
    out = proc.stdout
    assert "rollcheck: measured one engine on this machine: TTFT" in out, out[-3000:]
    warning = "rollcheck: WARNING: slo.ttft_s 0.001 s is not above this machine's unloaded TTFT"
    assert warning in out
    assert out.index(warning) < out.index("verdict FAIL")  # said before the verdict
    cal = summary["calibration"]
    assert cal["slo"]["ttft_s"] == 0.001 and cal["warnings"]
    assert cal["figures"]["batch"] == 4 and cal["figures"]["ttft_unloaded_s"] > 0.001
    assert "ttft_slo_budget" in failed_checks(summary)
    report = (next(tmp_path.glob("*/*/report.html"))).read_text()
    assert "This machine" in report and html.escape("is not above") in report
    # each engine answered its warm-up requests before the steady state began
    actions = [e.get("action") for e in summary_actions(tmp_path)]
    assert actions.count("warmed") == 3  # the scenario's three replicas
    assert max(i for i, a in enumerate(actions) if a == "warmed") < actions.index("steady_state")


# a rerun's latencies are the healthy run's only on a machine as busy for both: beside
# another pytest worker, the rerun's longest ITL came 27% slower (p = 3.6e-09), a real
# difference that compare rightly calls a regression
@pytest.mark.alone
def test_compare_claims_a_real_slowdown_and_not_the_noise_of_a_rerun(tmp_path):
    """Three sessions of the same drain, run as a user runs them: a rerun of the healthy
    config is not a regression; an engine whose tokens come 2.5 times slower is, on its
    time per output token, with the test's figures shown."""
    import subprocess
    import sys

    sessions = []
    # no more users than a replica has slots: with 6 users, nginx's round robin once put
    # four three-second answers on one replica, the next request queued behind them for
    # 1.8 s, and the rerun failed its TTFT budget (1 of 14 during the drain): a real
    # queue, which compare rightly calls a regression, but not the noise this test is
    # about. (Eight slots instead let one replica run six streams at once, and the
    # rerun's longest ITL came 14% slower, p = 1.1e-10: a real difference again.)
    slots = "load.users=4"
    # compare tells a latency only from 20 complete streams a run: four users of the slow
    # engine (answers of 3.3 s on average) sent 20 in the 8 s cool-down's run, one broke
    # its TTFT budget, and compare could not tell (19 of 20, in CI); 24 s gives it about 30
    slow = ["engine.itl_s=0.05", "scenario.cool_down_s=24"]  # (the last --set of a key wins)
    for i, sets in enumerate(([], [], slow)):
        # 8 s of load after recovery: enough requests in each healthy run for the test to tell
        proc, _ = run_scenarios(
            tmp_path / str(i), "drain and pod", "scenario.cool_down_s=8", slots, *sets
        )
        if not sets:  # the healthy config passes; the slow engine may break its TTFT budget
            assert proc.returncode == 0, proc.stdout[-2000:]
        sessions.append(next((tmp_path / str(i)).glob("*-local")))

    def compare(base: Path, cand: Path) -> tuple[subprocess.CompletedProcess, str]:
        out = tmp_path / f"{base.parent.name}-{cand.parent.name}.html"
        args = ["report", "--compare", str(base), str(cand), "--out", str(out)]
        r = subprocess.run(
            [sys.executable, "-m", "harness.cli", *args, "--fail-on-regression"],
            capture_output=True,
            text=True,
        )
        return r, out.read_text() if out.exists() else ""

    r, page = compare(sessions[0], sessions[1])
    assert r.returncode == 0 and "0 regressed" in r.stdout, r.stdout + page[-3000:]
    r, page = compare(sessions[0], sessions[2])
    assert r.returncode == 1 and "1 regressed" in r.stdout, r.stdout
    row = page[page.index("end to end per output token, median") :].split("</tr>")[0]
    assert "worse" in row and "Mann-Whitney U p = " in row, row


def test_a_drains_victim_holds_a_stream_past_its_preStop(tmp_path):
    """Mostly short answers (0.6 s) beside a few of 3 s, behind a 1 s preStop: the victim
    chosen by its engine's metrics alone often held only streams that ended during the
    preStop (INCONCLUSIVE in 3 of 8 runs); chosen while the gateway shows it holding a
    stream that should outlast the preStop, a stream is in flight at SIGTERM, and the
    drain is judged (8 of 8)."""
    proc, (summary,) = run_scenarios(
        tmp_path,
        "drain and pod",
        "load.max_tokens=[{tokens: 30, weight: 0.85}, {tokens: 150, weight: 0.15}]",
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    (check,) = [c for c in summary["checks"] if c["name"] == "in_flight_streams_finish"]
    assert check["status"] == "pass" and "streams in flight at SIGTERM" in check["population"]


def test_preemption_on_the_local_target_is_skipped_saying_why(tmp_path):
    """Preemption is kube-scheduler's: on the local target it is SKIPPED before its load,
    saying where it runs."""
    proc, (summary,) = run_scenarios(tmp_path, "preemption")
    assert summary["verdict"] == "skipped", summary
    assert "the local target has no scheduler" in summary["reason"], summary["reason"]
    assert "--target kube" in summary["reason"]
    assert proc.returncode == 0 and "Traceback" not in proc.stdout, proc.stdout[-2000:]


def test_a_lost_node_is_marked_late_and_its_streams_are_the_losss(tmp_path):
    """node_loss on the local target, well configured: the lost node's pods froze with
    streams in flight, which ended without completing (the client's stall timeout) and
    are the loss's; the control plane marked the node only after node_monitor_grace_s
    (12 s), and its pods' endpoints went then, not before; the gateway tried the lost
    pod at most once (a 1 s connect, then another replica), the replacement came 3 s
    after the mark, on another node: PASS."""
    proc, (summary,) = run_scenarios(tmp_path, "node_loss")
    assert summary["verdict"] == "pass", (summary["checks"], proc.stdout[-2000:])
    run = next(tmp_path.glob("*/*/events.jsonl")).parent
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    act = next(e for e in events if e["kind"] == "action" and e["detail"]["action"] == "node_loss")
    lost, t0 = set(act["detail"]["pods"]), act["t"]
    first = {
        k: min(e["t"] - t0 for e in events if e["kind"] == k and e["t"] >= t0)
        for k in ("node_not_ready", "endpoint_removed", "node_ready")
    }
    assert 11.5 <= first["node_not_ready"] <= first["endpoint_removed"], first
    assert not [e for e in events if e["kind"] == "unready" and e["pod"] in lost
                and e["t"] - t0 < 11.5]  # fmt: skip
    replacement = next(e for e in events if e["kind"] == "pod_created" and e["t"] > t0)
    assert replacement["node"] != act["node"]
    records = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    cut = [r for r in records if r["pod"] in lost and r["sent_at"] < t0 < r["sent_at"] + r["duration_s"]]  # fmt: skip
    assert cut and all(r["outcome"] != "complete" for r in cut), cut
    assert proc.returncode == 0 and "Traceback" not in proc.stdout


def test_an_oom_kill_without_a_memory_limit_is_skipped_saying_why(tmp_path):
    """No limit, nothing to cross: SKIPPED before the request, with the reason."""
    proc, (summary,) = run_scenarios(tmp_path, "oom_kill", "pod.memory_limit_mb=null")
    assert summary["verdict"] == "skipped", summary
    assert "has no memory limit: no request can cross it" in summary["reason"]
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_the_mirror_is_held_until_each_side_has_enough_to_compare(tmp_path):
    """A mirror of 1 s, a third of the requests: too few first tokens on the candidate to
    compare, so the window goes on until each side's engines answered min_samples in it
    (on a loaded machine the 6 s default once ended with 18, and the latency could not
    tell)."""
    proc, summaries = run_scenarios(
        tmp_path,
        "shadow",
        "shadow.window_s=1",
        "shadow.percent=34",
        "shadow.min_samples=30",
    )
    (summary,) = summaries
    assert summary["verdict"] == "pass", failed_checks(summary)
    shadow = summary["shadow"]
    started, ended = shadow["window"]
    assert ended - started > 1
    for side in ("baseline", "candidate"):
        assert shadow["histograms"][side]["vllm:time_to_first_token_seconds"][-1][1] >= 30
