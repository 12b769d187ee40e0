"""The verdict layer with literal data: every check passes, fails, and is inconclusive
when its population is empty or unknown. No processes, no sockets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness import checks as C
from harness import verdict as V
from harness.events import Event
from harness.gateway_logs import (
    ErrorLine,
    GatewayLine,
    attach_errors,
    parse_error_line,
    parse_upstreaminfo_line,
)
from harness.streams import StreamRecord

pytestmark = pytest.mark.unit

T = 1000.0  # the disruption


def rec(rid, outcome="complete", sent=T - 1, dur=3.0, pod=None, ttft=0.1, **kw) -> StreamRecord:
    return StreamRecord(
        request_id=rid,
        outcome=outcome,
        sent_at=sent,
        duration_s=dur,
        status=kw.pop("status", 200),
        ttft_s=ttft,
        pod=pod,
        **kw,
    )


def ev(t, kind, pod=None, **detail) -> Event:
    return Event(t, kind, pod, None, None, detail)


def data(records, events=(), **kw) -> V.RunData:
    base = dict(
        records=list(records),
        events=list(events),
        access=[],
        errors=[],
        sent=len(records),
        replicas=3,
        max_unavailable=0,
        stall_timeout_s=5.0,
        ttft_slo_s=1.0,
        t_act=T,
        t_recovered=T + 5,
        t_start=T - 10,
        t_end=T + 10,
        outcome_total=len(records),
        slo_budgets={"ttft": {"before": 0.0, "during": 0.25, "after": 0.0}},
    )
    base.update(kw)
    return V.RunData(**base)


SIGTERM = [ev(T, "terminating", "p1"), ev(T + 1, "sigterm", "p1"), ev(T + 4, "exited", "p1")]


def status(result) -> str:
    return str(result.status)


# --- the wrong PASS of the issue: aborted in-flight streams, no gateway logs ------------


def test_aborted_in_flight_streams_without_attribution_fail_the_drain():
    records = [rec(f"ok{i}", sent=T - 5 + i * 0.1, dur=2) for i in range(20)]
    records += [rec("a1", "aborted", sent=T - 1, dur=2.5), rec("a2", "aborted", sent=T, dur=2)]
    d = data(records, SIGTERM, victims=["p1"], victim_in_flight={"p1": 2})
    results = V.judge(
        d,
        [
            C.no_broken_streams,
            C.in_flight_streams_finish,
            C.no_abort_after_sigterm,
            C.gateway_clean,
        ],
    )
    by = {r.name: r for r in results}
    assert V.verdict(results) == "fail"
    assert status(by["no_broken_streams"]) == "fail"
    assert set(by["no_broken_streams"].requests) == {"a1", "a2"}
    assert status(by["in_flight_streams_finish"]) == "fail"
    assert "judged by count" in by["in_flight_streams_finish"].population
    assert status(by["gateway_clean"]) == "skipped"  # no gateway logs: not judged, not passed
    assert "traced 0 of 22" in V.attribution(d)["text"]
    assert "no gateway logs: 22" in V.attribution(d)["text"]


# --- in_flight_streams_finish -------------------------------------------------------------


@pytest.mark.parametrize(
    "records, kw, expected, words",
    [
        ([rec("r1", pod="p1"), rec("r2", pod="p2")], {}, "pass", "1 on p1"),
        ([rec("r1", "aborted", pod="p1"), rec("r2", pod="p2")], {}, "fail", "1 on p1"),
        ([rec("r1", pod="p2")], {}, "inconclusive", "no stream was in flight on p1"),
        ([rec("r1")], {"victim_in_flight": {"p1": 1}}, "pass", "judged by count"),
        ([rec("r1")], {}, "inconclusive", "could not be attributed"),
        ([rec("r1", pod="p1")], {"victims": []}, "inconclusive", "no pod was named"),
    ],
    ids=["traced-pass", "traced-fail", "none-on-victim", "by-count", "unknown", "no-victim"],
)
def test_in_flight_streams_finish(records, kw, expected, words):
    d = data(records, SIGTERM, **({"victims": ["p1"]} | kw))
    r = C.in_flight_streams_finish(d)
    assert status(r) == expected
    assert words in (r.population + (r.reason or ""))


def test_node_drain_judges_each_pod_at_its_own_sigterm():
    events = [ev(T + 1, "sigterm", "p1"), ev(T + 8, "sigterm", "p2")]
    # r2 started after p1's SIGTERM, on p2, and broke at p2's own SIGTERM
    records = [
        rec("r1", pod="p1", sent=T, dur=3),
        rec("r2", "aborted", pod="p2", sent=T + 5, dur=4),
    ]
    r = C.in_flight_streams_finish(data(records, events, victims=["p1", "p2"]))
    assert status(r) == "fail" and r.requests == ["r2"]
    assert "1 on p1, 1 on p2" in r.population


# --- no_abort_after_sigterm -------------------------------------------------------------


def test_no_abort_after_sigterm():
    late_bad = rec("late", "http_error", pod="p1", sent=T + 2, dur=0.1, status=500)
    late_bad.error = "cannot schedule new futures after shutdown"
    r = C.no_abort_after_sigterm(data([late_bad], SIGTERM, victims=["p1"]))
    assert status(r) == "fail" and r.requests == ["late"]
    assert "cannot schedule new futures" in r.hint  # the drain-time 500 of vLLM 0.32

    elsewhere = [rec("e1", pod="p2", sent=T + 2, dur=1)]
    r = C.no_abort_after_sigterm(data(elsewhere, SIGTERM, victims=["p1"]))
    assert status(r) == "pass" and "all served elsewhere" in r.population

    before = [rec("b1", pod="p2", sent=T - 5, dur=1)]
    r = C.no_abort_after_sigterm(data(before, SIGTERM, victims=["p1"]))
    assert status(r) == "inconclusive" and "no request was sent while p1 drained" in r.reason

    r = C.no_abort_after_sigterm(data(before, [], victims=["p1"]))
    assert status(r) == "inconclusive" and "no SIGTERM" in r.reason


# --- shared stream checks ---------------------------------------------------------------


def test_no_broken_and_no_hung_streams():
    assert status(C.no_broken_streams(data([rec("r1")]))) == "pass"
    assert status(C.no_broken_streams(data([rec("r1", "truncated")]))) == "fail"
    assert status(C.no_broken_streams(data([]))) == "inconclusive"
    assert status(C.no_hung_streams(data([rec("r1", "hung")]))) == "fail"
    assert status(C.no_hung_streams(data([rec("r1")]))) == "pass"
    assert status(C.no_hung_streams(data([]))) == "inconclusive"


def test_accounting():
    assert status(C.accounting(data([rec("r1")]))) == "pass"
    assert status(C.accounting(data([rec("r1")], sent=2))) == "fail"
    assert status(C.accounting(data([], sent=0))) == "inconclusive"
    d = data([rec("r1")], load_problems=["worker 1 never reported its last records"])
    assert status(C.accounting(d)) == "fail"


def gw(rid, status_code=200, upstream="10.0.0.1:8000", end=T + 1, rt=1.0, conn=None):
    return GatewayLine(rid, status_code, upstream, str(status_code), 100, rt, end, conn)


def test_gateway_clean():
    d = data([rec("r1")], access=[gw("r1")], gateway_logs="access.log")
    assert status(C.gateway_clean(d)) == "pass"
    d = data([rec("r1")], access=[gw("r1", 499)], gateway_logs="access.log")
    r = C.gateway_clean(d)
    assert status(r) == "fail" and r.requests == ["r1"] and "499" in r.hint
    line = gw("r1")
    line.errors.append("upstream prematurely closed connection while reading upstream")
    d = data([rec("r1", "reset")], access=[line], gateway_logs="access.log")
    assert status(C.gateway_clean(d)) == "fail"
    d = data([rec("r1")], access=[], gateway_logs="access.log", first_unparsed_line="garbage")
    r = C.gateway_clean(d)
    assert status(r) == "inconclusive" and "garbage" in r.reason
    assert status(C.gateway_clean(data([rec("r1")]))) == "skipped"


def test_gateway_clean_leaves_out_the_killed_pods_own_lines():
    line = gw("v1")
    line.errors.append("upstream prematurely closed connection while reading upstream")
    records = [rec("v1", "reset", pod="p1"), rec("o1", pod="p2")]
    d = data(records, access=[line, gw("o1")], gateway_logs="a", victims=["p1"])
    assert status(C.gateway_clean(d)) == "fail"
    d = dataclasses.replace(d, expect_broken_on_victims=True)
    r = C.gateway_clean(d)
    assert status(r) == "pass" and "1 of them cut by the kill left out" in r.population


# --- SLO budgets and goodput ---------------------------------------------------------------


def test_ttft_budget_per_phase_names_the_window_and_pods():
    records = [rec(f"b{i}", sent=T - 3 + i * 0.1, dur=1) for i in range(10)]
    records += [rec(f"d{i}", sent=T + 1 + i * 0.1, dur=1, ttft=2.0, pod="p2") for i in range(3)]
    records += [rec(f"g{i}", sent=T + 1 + i * 0.1, dur=1, pod="p2") for i in range(3)]
    records += [rec(f"a{i}", sent=T + 6 + i * 0.1, dur=1) for i in range(5)]
    r = C.ttft_slo_budget(data(records))
    assert status(r) == "fail"
    assert r.observed["during"] == "3 of 6 (50.0%)"
    assert "during the disruption, +1.0 s .. +1.2 s" in r.hint and "p2" in r.hint
    g = C.goodput(data(records))
    assert g["during"] == {"good": 3, "requests": 6, "share": 0.5}
    assert g["before"]["share"] == 1.0


def test_requests_without_a_first_token_are_breaches():
    records = [rec("b", sent=T - 1, dur=0.5)]
    records += [rec("e", "http_error", sent=T + 1, ttft=None, status=503)] + [
        rec(f"d{i}", sent=T + 1, dur=1) for i in range(2)
    ]
    r = C.ttft_slo_budget(data(records))
    assert status(r) == "fail" and r.requests == ["e"]


def test_a_stream_cut_by_the_disruption_before_its_first_token_is_judged_in_it():
    """Sent 0.02 s before a pod kill and reset by it with no token: the kill's doing, not a
    breach before the disruption (a pod_kill once FAILed its 'before' budget on this)."""
    before = [rec(f"b{i}", sent=T - 3 + i * 0.1, dur=1) for i in range(10)]
    cut = rec("cut", "reset", sent=T - 0.02, dur=0.03, ttft=None, pod="p1")
    during = [rec(f"d{i}", sent=T + 1, dur=1) for i in range(3)]
    r = C.ttft_slo_budget(data(before + [cut] + during))
    assert r.observed["before"] == "0 of 10 (0.0%)"
    assert r.observed["during"] == "1 of 4 (25.0%)" and status(r) == "pass"  # 25 % allowed
    # one that waited out its SLO before the disruption is a breach before it
    slow = rec("slow", "hung", sent=T - 3, dur=3.5, ttft=None)
    r = C.ttft_slo_budget(data(before + [slow] + during))
    assert r.observed["before"] == "1 of 11 (9.1%)" and status(r) == "fail"


def test_pod_kill_leaves_its_victims_cut_streams_out_of_the_ttft_budget():
    """pod_kill: a stream on the killed pod, cut before its first token while its SLO still
    ran, is the kill's casualty (killed_streams_fail_fast judges it), not a slow first
    token; a well-configured pod_kill once FAILed its 'during' budget on one (1 of 4)."""
    before = [rec(f"b{i}", sent=T - 3 + i * 0.1, dur=1) for i in range(10)]
    during = [rec(f"d{i}", sent=T + 1, dur=1) for i in range(3)]
    cut = rec("cut", "reset", sent=T - 0.05, dur=0.05, ttft=None, pod="p1")
    strict = {"ttft": {"before": 0.0, "during": 0.05, "after": 0.0}}
    kill = dict(victims=["p1"], expect_broken_on_victims=True, slo_budgets=strict)
    r = C.ttft_slo_budget(data(before + [cut] + during, **kill))
    assert r.observed["during"] == "0 of 3 (0.0%)" and status(r) == "pass"
    assert "1 on the killed pod cut before their first token left out" in r.population
    # the same stream outside pod_kill, or on a pod that was not killed, is judged
    r = C.ttft_slo_budget(data(before + [cut] + during, slo_budgets=strict))
    assert r.observed["during"] == "1 of 4 (25.0%)" and status(r) == "fail"
    elsewhere = rec("cut2", "reset", sent=T - 0.05, dur=0.05, ttft=None, pod="p2")
    r = C.ttft_slo_budget(data(before + [elsewhere] + during, **kill))
    assert status(r) == "fail"
    # one on the killed pod that had waited out its SLO before the kill is still a breach
    slow = rec("slow", "reset", sent=T - 3, dur=3.05, ttft=None, pod="p1")
    r = C.ttft_slo_budget(data(before + [slow] + during, **kill))
    assert r.observed["before"] == "1 of 11 (9.1%)" and status(r) == "fail"


def test_streams_the_act_cut_count_in_the_disruption_not_the_baseline_before_it():
    """pod_kill's report once put both cut streams in "before" (goodput 81.8% before, 100%
    during): a stream sent before the act and broken at or after it is the act's doing."""
    from harness.report.summary import signals

    before = [rec(f"b{i}", sent=T - 3 + i * 0.1, dur=1) for i in range(9)]
    spans = [rec("long", sent=T - 1, dur=3)]  # complete across the act: served before it
    cut = [rec(f"cut{i}", "truncated", sent=T - 0.5, dur=0.6, pod="p1") for i in range(2)]
    during = [rec(f"d{i}", sent=T + 1, dur=1) for i in range(3)]
    early = rec("early", "truncated", sent=T - 3, dur=1)  # broke before the act: before
    d = data(before + spans + cut + during + [early])
    g = C.goodput(d)
    assert g["before"] == {"good": 10, "requests": 11, "share": 0.9091}
    assert g["during"] == {"good": 3, "requests": 5, "share": 0.6}
    s = signals(d)
    assert s["before"]["truncated"] == 1 and s["during"]["truncated"] == 2


def test_ttft_budget_inconclusive_without_requests_in_the_disruption():
    r = C.ttft_slo_budget(data([rec("b", sent=T - 2, dur=1)]))
    assert status(r) == "inconclusive" and "during" in r.reason
    assert status(C.itl_slo_budget(data([rec("b")]))) == "skipped"  # no ITL SLO set
    ok = [rec("b", sent=T - 2, dur=1), rec("d", sent=T + 1, dur=1)]
    assert status(C.ttft_slo_budget(data(ok))) == "pass"


def test_a_drain_judges_the_streams_in_flight_at_sigterm_not_at_the_eviction():
    """SIGTERM comes after preStop (T + 1 here): a stream that ended during preStop, 10 ms
    before SIGTERM, met no SIGTERM and is no evidence; one that ended 10 ms after is. A
    drain of short answers behind a long preStop PASSed on the first kind alone."""
    early = rec("early", pod="p1", sent=T - 1, dur=1.99)  # ends T + 0.99
    late = rec("late", pod="p1", sent=T - 1, dur=2.01)  # ends T + 1.01
    d = data([early, late], SIGTERM, victims=["p1"])
    r = C.in_flight_streams_finish(d)
    assert status(r) == "pass" and r.observed == "0 of 1", r  # late only
    assert "in flight at SIGTERM" in r.population
    r = C.in_flight_streams_finish(data([early], SIGTERM, victims=["p1"]))
    assert status(r) == "inconclusive"
    assert "ended during preStop, before SIGTERM" in r.reason and "load.max_tokens" in r.reason
    # a SIGTERM estimated from the pod spec (Kubernetes) is labelled so
    estimated = [ev(T, "terminating", "p1"), ev(T + 1, "sigterm", "p1", estimated=True)]
    r = C.in_flight_streams_finish(data([late], estimated, victims=["p1"]))
    assert "SIGTERM (estimated from preStop)" in r.population


# --- pod_kill ---------------------------------------------------------------------------


def test_killed_streams_fail_fast_and_other_pods_untouched():
    fast = rec("k1", "reset", pod="p1", sent=T - 1, dur=1.1)
    hung = rec("k2", "hung", pod="p1", sent=T - 1, dur=7)
    other = rec("o1", pod="p2", sent=T - 1, dur=3)
    d = data([fast, other], victims=["p1"])
    assert status(C.killed_streams_fail_fast(d)) == "pass"
    assert status(C.other_pods_untouched(d)) == "pass"
    d = data([fast, hung, other], victims=["p1"])
    assert C.killed_streams_fail_fast(d).requests == ["k2"]
    d = data([fast, rec("o2", "reset", pod="p2", sent=T - 1, dur=1.1)], victims=["p1"])
    assert status(C.other_pods_untouched(d)) == "fail"
    d = data([other], victims=["p1"])
    assert status(C.killed_streams_fail_fast(d)) == "inconclusive"


def test_pod_kill_exempts_only_the_streams_the_kill_cut():
    """The killed pod's streams in flight from the kill until the target showed it dead may
    break; a request that reached the dead pod afterwards is judged like any other (a
    single replica behind a slow gateway: 360 of 374 got 502 after the kill, and passed)."""
    dead = [ev(T + 0.005, "exited", "p1")]
    cut = rec("cut", "reset", pod="p1", sent=T - 1, dur=1.0)  # ended at the kill itself
    late = rec("late", "http_error", pod="p1", sent=T + 0.01, dur=0.01, ttft=None, status=502)
    before = rec("done", pod="p1", sent=T - 3, dur=2.99)  # ended 10 ms before the kill
    other = rec("o1", pod="p2", sent=T - 1, dur=3)
    kill = dict(victims=["p1"], expect_broken_on_victims=True)
    d = data([cut, late, before, other], dead, **kill)
    assert [d.struck(r) for r in (cut, late, before, other)] == [True, False, False, False]
    r = C.other_pods_untouched(d)
    assert status(r) == "fail" and r.requests == ["late"]
    assert "reached the killed pod after it was dead" in r.hint
    assert C.killed_streams_fail_fast(d).population.startswith("1 streams on the killed pod")
    lines = [gw("cut"), gw("late"), gw("o1")]
    lines[0].status = lines[1].status = 502
    r = C.gateway_clean(dataclasses.replace(d, access=lines, gateway_logs="a"))
    assert status(r) == "fail" and r.requests == ["late"], r
    assert "1 of them cut by the kill left out" in r.population
    # on a target that shows the death later (a pod removed), the window runs until then
    slow_to_show = [ev(T + 0.5, "pod_removed", "p1")]
    d = data([cut, late, other], slow_to_show, **kill)
    assert d.struck(late) and status(C.other_pods_untouched(d)) == "pass"


def test_recovery_says_why_it_was_not_seen():
    why = "no replacement of p1 served a complete stream within scenario.recovery_s (30 s)"
    d = data([rec("a")], [ev(T + 1, "action", action="not_recovered", why=why)], t_recovered=None)
    r = C.recovery_time(d)
    assert status(r) == "fail" and r.observed == "did not recover" and r.hint == why


def test_pod_kill_without_attribution_is_judged_by_count():
    k = [rec(f"k{i}", "reset", sent=T - 1, dur=1.1) for i in range(2)]
    ok = [rec("o1", sent=T - 1, dur=3)]
    d = data(k + ok, victims=["p1"], victim_in_flight={"p1": 2})
    r = C.killed_streams_fail_fast(d)
    assert status(r) == "pass" and "judged by count" in r.population
    assert status(C.other_pods_untouched(d)) == "pass"
    d = data(k + ok, victims=["p1"], victim_in_flight={"p1": 1})
    r = C.other_pods_untouched(d)
    assert status(r) == "fail" and "<= 1" in r.expected
    d = data(k + ok, victims=["p1"], victim_in_flight={})
    assert status(C.killed_streams_fail_fast(d)) == "inconclusive"


# --- cluster-scoped checks -----------------------------------------------------------------


def test_capacity_floor():
    check = C.capacity_floor_for(1)
    caps = [ev(T + 1, "capacity", available=2, pods=3), ev(T + 2, "capacity", available=3)]
    assert status(check(data([], caps))) == "pass"
    low = [ev(T + 1, "capacity", available=1, pods=3)]
    assert status(check(data([], low))) == "fail"
    assert status(check(data([], []))) == "inconclusive"


def test_recovery_time():
    assert status(C.recovery_time(data([]))) == "pass"
    assert status(C.recovery_time(data([], t_recovered=None))) == "fail"
    assert status(C.recovery_time(data([], t_recovered=T + 100))) == "fail"
    assert status(C.recovery_time(data([], t_act=None))) == "inconclusive"


def test_long_answer_finishes():
    long_ok = rec("l1", sent=T - 2, dur=10, tags={"user": "long"})
    long_bad = rec("l2", "aborted", sent=T - 2, dur=3, tags={"user": "long"})
    assert status(C.long_answer_finishes(data([long_ok]))) == "pass"
    assert status(C.long_answer_finishes(data([long_bad]))) == "fail"
    done_before = rec("l3", sent=T - 5, dur=1, tags={"user": "long"})
    r = C.long_answer_finishes(data([done_before]))
    assert status(r) == "inconclusive" and "long_answer_tokens" in r.reason


def test_a_long_answer_is_evidence_only_if_it_was_decoding_when_the_scaler_could_act():
    """A scaler that reads request rate acts autoscaler.idle_s after it takes over: an
    answer that ended 1.2 s before then never met it (it PASSed); one still decoding did."""
    idle = dict(scaler_idle_s=2.0)
    short = rec("l1", sent=T - 2, dur=2.8, tags={"user": "long"})  # ends T + 0.8
    r = C.long_answer_finishes(data([short], **idle))
    assert status(r) == "inconclusive"
    assert "ended 1.2 s before a scaler blind to it could act" in r.reason, r.reason
    assert "load.long_answer_tokens" in r.reason
    outlasting = rec("l2", sent=T - 2, dur=4.01, tags={"user": "long"})  # ends T + 2.01
    assert status(C.long_answer_finishes(data([outlasting], **idle))) == "pass"
    # the replica removed before the idle time (a scaler that did not wait): judged then
    cut = rec("l3", "error_event", sent=T - 2, dur=3, tags={"user": "long"})
    removed = [ev(T + 0.5, "terminating", "p1")]
    r = C.long_answer_finishes(data([cut], removed, victims=["p1"], **idle))
    assert status(r) == "fail" and r.requests == ["l3"]


def test_a_scale_down_is_judged_when_the_target_shows_the_replica_removed():
    answer = rec("l1", sent=T - 2, dur=5, tags={"user": "long"}, pod="p2")  # ends T + 3
    removed_late = [ev(T + 3.5, "terminating", "p1")]  # 0.5 s after the answer ended
    r = C.long_answer_survives_scale_down(data([answer], removed_late, victims=["p1"]))
    assert status(r) == "inconclusive" and "ended 0.5 s before the replica was removed" in r.reason
    removed = [ev(T + 0.2, "terminating", "p1")]
    r = C.long_answer_survives_scale_down(data([answer], removed, victims=["p1"]))
    assert (
        status(r) == "pass"
        and r.population == "1 long answers still decoding when the replica was removed"
    )
    r = C.long_answer_survives_scale_down(data([answer], [], victims=["p1"]))
    assert status(r) == "inconclusive" and "never showed the scaler act" in r.reason
    # Kubernetes stamps the deletion to the second: up to 1 s before the act is the act's
    stamped_early = [ev(T - 0.72, "terminating", "p1")]
    r = C.long_answer_survives_scale_down(data([answer], stamped_early, victims=["p1"]))
    assert status(r) == "pass"


def test_scaled_to_zero_from_observed_pod_counts():
    zero = [ev(T + 1, "capacity", available=0, pods=1), ev(T + 3, "capacity", available=0, pods=0)]
    assert status(C.scaled_to_zero(data([], zero))) == "pass"
    one = [ev(T + 1, "capacity", available=0, pods=1)]
    assert status(C.scaled_to_zero(data([], one))) == "fail"
    assert status(C.scaled_to_zero(data([], zero, t_act=None))) == "inconclusive"


def test_rollout_duration_predicted_from_this_runs_own_pod_times():
    check = C.rollout_duration_for(1, 0, False)
    events = []
    for i in range(3):  # three new pods, each 10 s from creation to ready; old ones drain 2 s
        events += [ev(T + i * 12, "pod_created", f"n{i}"), ev(T + i * 12 + 10, "ready", f"n{i}")]
        events += [
            ev(T + i * 12 + 10, "terminating", f"o{i}"),
            ev(T + i * 12 + 12, "pod_removed", f"o{i}"),
        ]
    done = [ev(T + 36, "rollout_complete")]
    r = check(data([], events + done))
    assert status(r) == "pass" and "ready 10.0 s" in r.expected
    r = check(data([], events + [ev(T + 400, "rollout_complete")]))
    assert status(r) == "fail"
    assert status(check(data([], events))) == "fail"  # never finished
    r = check(data([], done))  # nothing measured: no prediction, not a pass
    assert status(r) == "skipped" and "no prediction" in r.reason


def test_ttft_recovers_after_step():
    steady = [rec(f"s{i}", sent=T + 0.1 * i, dur=1, ttft=0.2) for i in range(60)]
    assert status(C.ttft_recovers_after_step(data(steady))) == "pass"
    slow = [rec(f"x{i}", sent=T + 0.1 * i, dur=1, ttft=3.0) for i in range(20)]
    late_ok = [rec(f"y{i}", sent=T + 2 + 0.1 * i, dur=1, ttft=0.2) for i in range(30)]
    r = C.ttft_recovers_after_step(data(slow + late_ok))
    assert status(r) == "pass" and "2.0 s" in r.observed
    # still over the SLO when the run ends: not recovered
    r = C.ttft_recovers_after_step(data(slow + [rec("z", sent=T + 3, dur=1, ttft=None)]))
    assert status(r) == "fail"
    # errors count as breaches
    errors = [
        rec(f"e{i}", "http_error", sent=T + 0.1 * i, ttft=None, status=503) for i in range(30)
    ]
    assert status(C.ttft_recovers_after_step(data(errors))) == "fail"
    assert status(C.ttft_recovers_after_step(data([]))) == "inconclusive"
    assert status(C.ttft_recovers_after_step(data(steady, t_act=None))) == "inconclusive"


# --- the verdict and bad input -------------------------------------------------------------


def test_verdict_order_and_skipped_checks():
    p, f = (
        V.passed("a", observed=0, expected=0, population="x"),
        V.failed("b", observed=1, expected=0, population="x"),
    )
    i, s = V.inconclusive("c", expected=0, reason="why"), V.skipped("d", expected=0, reason="why")
    assert V.verdict([p, f, i, s]) == "fail"
    assert V.verdict([p, i, s]) == "inconclusive"
    assert V.verdict([p, s]) == "pass"
    assert V.verdict([s]) == "inconclusive"
    assert i.to_dict()["passed"] is False and p.to_dict()["passed"] is True


def test_records_counted_twice_or_from_another_run_are_refused():
    with pytest.raises(V.VerdictInputError, match="more than one record"):
        V.judge(data([rec("r1"), rec("r1")]), [C.no_broken_streams])
    with pytest.raises(V.VerdictInputError, match="another run"):
        V.judge(data([rec("old", sent=T - 3600)]), [C.no_broken_streams])


def test_failure_message_says_inconclusive_and_what_to_change():
    d = data([rec("r1", pod="p2")], SIGTERM, victims=["p1"])
    results = V.judge(d, [C.in_flight_streams_finish])
    text = V.failure_message(results, d, "drain on kube")
    assert "verdict INCONCLUSIVE" in text
    assert "no stream was in flight on p1 at its SIGTERM" in text
    assert "scenario.in_flight" in text


# --- hints follow what vLLM 0.32 really does -------------------------------------------------


@pytest.mark.parametrize("outcome", ["aborted", "error_event", "hung"])
def test_each_sigterm_ending_gets_a_hint_naming_all_three(outcome):
    """vLLM 0.32's default --shutdown-timeout 0 ends a stream at SIGTERM in one of three
    ways (measured): whichever one a run drew, the hint names the race and the fix."""
    r = rec("x", outcome)
    if outcome == "error_event":
        r.error = "EngineCore encountered an issue. See stack trace (above) for the root cause."
    hint = C.hint_for_outcomes([r])
    for ending in ("finish_reason abort + [DONE]", "EngineCore encountered an issue", "hang"):
        assert ending in hint, (outcome, hint)
    assert "--shutdown-timeout" in hint and "terminationGracePeriodSeconds" in hint
    if outcome == "hung":
        assert "SIGKILL" in hint and "stall timeout" in hint


def test_an_error_event_that_is_not_the_engine_core_gets_no_sigterm_hint():
    r = rec("x", "error_event")
    r.error = "injected engine error"
    assert "SIGTERM" not in C.hint_for_outcomes([r])


# --- ingress-nginx: no connection number, so errors join by upstream and time ---------------

UPSTREAMINFO = (
    '10.244.0.1 - - [01/Dec/2026:06:00:05 +0000] "POST /v1/chat/completions HTTP/1.1" 200 '
    '812 "-" "python-httpx/0.28.1" 311 4.012 [default-rollcheck-sim-8000] [] 10.244.1.7:8000 '
    "812 4.011 200 {rid}"
)


def test_ingress_nginx_upstreaminfo_errors_join_by_upstream_and_time():
    import calendar
    import time

    a = parse_upstreaminfo_line(UPSTREAMINFO.format(rid="req-1"))
    b = parse_upstreaminfo_line(
        UPSTREAMINFO.format(rid="req-2").replace("10.244.1.7:8000", "10.244.1.9:8000")
    )
    assert a.request_id == "req-1" and a.connection is None
    end = calendar.timegm(time.strptime("2026-12-01 06:00:05", "%Y-%m-%d %H:%M:%S"))
    err = ErrorLine(
        end - 1,
        "error",
        12,
        "upstream prematurely closed connection while reading upstream",
        "10.244.1.7:8000",
    )
    stray = dataclasses.replace(err, upstream="10.9.9.9:8000")
    joined = attach_errors([a, b], [err, stray])
    assert joined == [err]
    assert a.errors and not b.errors


def test_nginx_error_lines_join_by_connection():
    line = gw("r1", conn=7, end=T + 2, rt=3)
    e = parse_error_line(
        "2026/12/01 06:00:05 [error] 31#31: *7 upstream prematurely closed connection while "
        'reading upstream, client: 127.0.0.1, upstream: "http://127.0.0.1:9001/v1/chat", host: "x"'
    )
    e = dataclasses.replace(e, t=T + 1)
    assert attach_errors([line], [e]) == [e] and line.errors


# --- config: budgets, SLOs and the stop timeout --------------------------------------------


@pytest.mark.parametrize(
    "sets, words",
    [
        (
            ["slo.ttft_budget.during=1.5"],
            "slo.ttft_budget: during: a budget is a share from 0 to 1",
        ),
        (["slo.ttft_s=0"], "slo: ttft_s: an SLO must be above zero"),
        (
            ["load.stop_timeout_s=2", "slo.stall_timeout_s=5"],
            "load.stop_timeout_s (2) is below slo.stall_timeout_s (5)",
        ),
        (
            # the GPU profile's nightly did this: a step at 10 s inside a 60 s warm-up
            ["scenario.warmup_s=60", "load.step_at_s=10"],
            "--set load.step_at_s=10: config: load.step_at_s (10) is inside scenario.warmup_s",
        ),
    ],
)
def test_bad_slo_settings_are_one_line_errors(sets, words):
    from harness.config import ConfigError
    from harness.config.schema import load_config

    with pytest.raises(ConfigError) as info:
        load_config(None, sets)
    assert words in str(info.value) and "\n" not in str(info.value)


# --- Envoy (Gateway API, llm-d): default text format and JSON ------------------------------

ENVOY = (
    '[2026-12-01T06:00:01.000Z] "POST /v1/chat/completions HTTP/1.1" {code} {flags} 311 812 '
    '{ms} 3 "-" "python-httpx/0.28.1" "{rid}" "gw.example" "10.244.1.7:8000"'
)


def test_envoy_default_format_and_its_response_flags():
    from harness.gateway_logs import gateway_summary, parse_envoy_line

    ok = parse_envoy_line(ENVOY.format(code=200, flags="-", ms=4012, rid="req-1"))
    assert (ok.request_id, ok.status, ok.upstream_addr, ok.flags) == (
        "req-1",
        200,
        "10.244.1.7:8000",
        [],
    )
    assert ok.request_time_s == 4.012 and ok.end_t == pytest.approx(ok.start_t + 4.012)
    cut = parse_envoy_line(ENVOY.format(code=200, flags="UC", ms=2000, rid="req-2"))
    gone = parse_envoy_line(ENVOY.format(code=0, flags="DC", ms=900, rid="req-3"))
    assert gone.status == 499  # the client left before the response began: nginx's 499
    records = [rec("req-1"), rec("req-2"), rec("req-3", outcome="cancelled")]
    r = C.gateway_clean(data(records, access=[ok, cut, gone], gateway_logs="envoy.log"))
    assert r.status == "fail"
    assert r.observed["upstream_prematurely_closed"] == 1 and r.observed["499"] == 1
    assert gateway_summary([ok, cut, gone], [])["upstream_prematurely_closed"] == 1


def test_envoy_json_lines_are_read_beside_the_other_formats(tmp_path):
    from harness.gateway_logs import read_access_log

    line = {
        "start_time": "2026-12-01T06:00:01.000Z",
        "response_code": 200,
        "response_flags": "UR",
        "duration": 1500,
        "bytes_sent": 90,
        "x_request_id": "req-9",
        "upstream_host": "10.244.1.9:8000",
        "method": "POST",
    }
    log = tmp_path / "access.log"
    log.write_text(
        json.dumps(line)
        + "\n"
        + ENVOY.format(code=200, flags="-", ms=10, rid="req-1")
        + "\n"
        + UPSTREAMINFO.format(rid="req-2")
        + "\nnot a log line\n"
    )
    access, unparsed = read_access_log(log)
    assert [a.request_id for a in access] == ["req-9", "req-1", "req-2"]
    assert access[0].flags == ["UR"] and "upstream prematurely closed" in access[0].errors[0]
    assert unparsed.count == 1 and unparsed.first == "not a log line"


def test_logs_copied_from_a_shared_ingress_keep_only_this_runs_lines(tmp_path):
    from harness.gateway_logs import keep_only_run_lines

    access, error = tmp_path / "access.log", tmp_path / "error.log"
    access.write_text(
        UPSTREAMINFO.format(rid="ours-1")
        + "\n"
        + UPSTREAMINFO.format(rid="another-tenant")
        + "\n"
        + ENVOY.format(code=200, flags="-", ms=10, rid="ours-2")
        + "\ngarbage\n"
    )
    mine = "2026/12/01 06:00:04 [error] 31#31: *7 upstream prematurely closed connection"
    theirs = "2026/12/01 06:00:04 [error] 31#31: *8 connect() failed (111)"
    error.write_text(mine + "\n" + theirs + "\n")
    joined = [e for e in [parse_error_line(mine)] if e is not None]
    dropped = keep_only_run_lines(access, error, {"ours-1", "ours-2"}, joined)
    assert dropped == 3
    assert "another-tenant" not in access.read_text() and "garbage" not in access.read_text()
    assert access.read_text().count("\n") == 2
    assert error.read_text() == mine + "\n"


def test_a_version_that_never_became_ready_does_not_pass_the_startup_check():
    """No restart is not evidence of a good start-up: the version must also be ready."""
    start = [ev(T, "pod_created", "v2-a"), ev(T + 0.1, "container_started", "v2-a")]
    probes = {"startup": None, "liveness": {"period_s": 1.0, "failure_threshold": 3}}
    check = C.starts_without_restarts("v2", {"v2-a": 0}, probes, 4.0)
    r = check(data([rec("r1")], start))
    assert r.status == "fail" and "became ready" in r.observed
    ready = start + [ev(T + 4.5, "ready", "v2-a")]
    r = check(data([rec("r1")], ready))
    assert r.status == "pass" and "start-up 4.5 s" in r.observed
    restarted = C.starts_without_restarts("v2", {"v2-a": 2}, probes, 4.0)
    r = restarted(data([rec("r1")], start + [ev(T + 3, "probe_failed", "v2-a", probe="liveness")]))
    assert r.status == "fail" and "start-up 4 s > liveness 3 x 1 s = 3 s" in r.hint
    assert C.starts_without_restarts("v2", {}, probes, 4.0)(data([rec("r1")])).status == (
        "inconclusive"
    )


def test_the_gpu_profile_passes_its_own_config_checks():
    """profiles/gpu.yaml, as the nightly loads it: its load step after the warm-up,
    and answers that fit the 8k-context model it says it is sized for."""
    from harness.config.schema import load_config

    root = Path(__file__).resolve().parents[1]
    cfg = load_config(root / "profiles/gpu.yaml")
    assert cfg.load.step_at_s > cfg.scenario.warmup_s
    prompt = max(p.tokens for p in cfg.load.prompt_tokens)
    longest = max([m.tokens for m in cfg.load.max_tokens] + [cfg.load.long_answer_tokens])
    assert longest + prompt <= 8192


@pytest.mark.unit
@pytest.mark.parametrize(
    "verdicts, unreadable, want",
    [
        (["pass", "fail", "inconclusive"], False, "fail"),
        (["pass", "inconclusive", "skipped"], False, "inconclusive"),
        (["pass", "skipped"], True, "inconclusive"),  # a run that could not be read
        (["pass", "skipped"], False, "pass"),
        (["skipped", "skipped"], False, "skipped"),
    ],
)
def test_a_sessions_verdict_is_its_worst_runs(verdicts, unreadable, want):
    from harness.verdict import VERDICT_RANK, overall

    assert overall(verdicts, unreadable) == want
    assert sorted(VERDICT_RANK, key=VERDICT_RANK.get) == ["pass", "skipped", "inconclusive", "fail"]


def test_istio_text_and_envoy_gateway_json_lines_as_shipped():
    """Literal lines in each project's default format. Istio's TEXT format
    (istio.io docs, tasks/observability/logs/access-log: Envoy's default with the code
    details, termination details and transport failure after the flags, and the
    cluster and addresses after the upstream host); Envoy Gateway's default JSON
    (gateway.envoyproxy.io, proxy observability: every value a string)."""
    from harness.gateway_logs import parse_access_line

    istio = (
        '[2022-06-21T22:15:37.485Z] "GET /status/418 HTTP/1.1" 418 - via_upstream - "-" 0 135 '
        '2 1 "-" "curl/7.83.1-DEV" "54aa5b6c-0fe8-9a98-8f08-4e6ffd86e0da" "httpbin:8000" '
        '"10.44.1.11:80" outbound|8000||httpbin.foo.svc.cluster.local 10.44.1.10:55440 '
        "10.0.2.16:8000 10.44.1.10:38788 - default"
    )
    line = parse_access_line(istio)
    assert (line.request_id, line.status, line.upstream_addr, line.body_bytes_sent) == (
        "54aa5b6c-0fe8-9a98-8f08-4e6ffd86e0da",
        418,
        "10.44.1.11:80",
        135,
    )
    eg = {
        "start_time": "2026-12-01T06:00:01.000Z",
        "method": "POST",
        "x-envoy-origin-path": "/v1/chat/completions",
        "protocol": "HTTP/1.1",
        "response_code": "200",
        "response_flags": "UC",
        "response_code_details": "upstream_reset_after_response_started{connection_termination}",
        "connection_termination_details": "-",
        "upstream_transport_failure_reason": "-",
        "bytes_received": "180",
        "bytes_sent": "4096",
        "duration": "2500",
        "x-envoy-upstream-service-time": "40",
        "x-forwarded-for": "10.0.0.1",
        "user-agent": "python-httpx/0.28.1",
        "x-request-id": "req-eg-1",
        ":authority": "gw.example",
        "upstream_host": "10.244.1.9:8000",
        "upstream_cluster": "httproute/llm/vllm/rule/0",
        "upstream_local_address": "10.244.0.5:41234",
        "downstream_local_address": "10.244.0.5:10080",
        "downstream_remote_address": "10.0.0.1:51000",
        "requested_server_name": "-",
        "route_name": "httproute/llm/vllm/rule/0/match/0/gw_example",
    }
    line = parse_access_line(json.dumps(eg))
    assert (line.request_id, line.status, line.upstream_addr, line.request_time_s) == (
        "req-eg-1",
        200,
        "10.244.1.9:8000",
        2.5,
    )
    assert line.flags == ["UC"] and "upstream prematurely closed" in line.errors[0]


def test_slo_offenders_are_listed_worst_first_for_itl_as_for_ttft():
    """The ITL budget's offenders in order of their longest gap (the sort read an
    attribute that does not exist, itl_s, and kept the records' own order)."""
    records = [rec(f"b{i}", sent=T - 3 + i * 0.1, dur=1, itl_max_s=0.01) for i in range(4)]
    gaps = {"d0": 1.5, "d1": 4.0, "d2": 2.5}
    records += [rec(r, sent=T + 1, dur=1, itl_max_s=g) for r, g in gaps.items()]
    d = data(records, itl_slo_s=1.0, slo_budgets={"itl": {"before": 0, "during": 0, "after": 0}})
    r = C.itl_slo_budget(d)
    assert status(r) == "fail" and r.requests == ["d1", "d2", "d0"]
    ttft = C.ttft_slo_budget(data([rec("x", sent=T + 1, ttft=2.0), rec("y", sent=T + 1, ttft=3.0)]))
    assert ttft.requests == ["y", "x"]


def test_oom_killed_once_confirms_the_act_and_fails_a_load_that_crosses_the_limit():
    oom = dict(code=137, reason="OOMKilled")
    act = [ev(T, "action", action="oom_request", context_tokens=400000)]
    kw = dict(victims=["p1"], expect_broken_on_victims=True)
    records = [rec("a", sent=T - 3, dur=1)]
    r = C.oom_killed_once(
        data(records, act + [ev(T + 0.3, "exited", "p1", restarts=1, **oom)], **kw)
    )
    assert status(r) == "pass" and r.observed == "OOMKilled p1 at +0.30 s (exit 137, restarts 1)"
    # the restarted engine, or another, OOMKilled again: the load itself crosses the limit
    again = [ev(T + 0.3, "exited", "p1", **oom), ev(T + 4, "exited", "p2", **oom)]
    r = C.oom_killed_once(data(records, act + again, **kw))
    assert status(r) == "fail" and "1 more OOMKills under the load (p2)" in r.observed
    assert "crash loop" in r.hint and "max_num_seqs" in r.hint
    # one before the act counts too (the load crossed it first)
    early = [ev(T - 2, "exited", "p3", **oom), ev(T + 0.3, "exited", "p1", **oom)]
    assert status(C.oom_killed_once(data(records, act + early, **kw))) == "fail"
    # the engine exited otherwise, or held the request: no evidence of an OOMKill
    other = C.oom_killed_once(data(records, act + [ev(T + 0.3, "exited", "p1", code=3)], **kw))
    assert status(other) == "inconclusive" and "code 3, not OOMKilled" in other.reason
    held = C.oom_killed_once(data(records, act, **kw))
    assert status(held) == "inconclusive" and "held the request" in held.reason
    # a real engine refuses a context above its max_model_len: said, not "held"
    refused = act + [
        ev(T + 0.1, "action", "p1", action="oom_answer", outcome="http_error", status=400)
    ]
    r = C.oom_killed_once(data(records, refused, **kw))
    assert status(r) == "inconclusive" and "refused the request (HTTP 400)" in r.reason


def test_a_retried_request_that_kills_again_is_a_crash_loop_of_one_request():
    """oom_kill with scenario.oom_retries: each OOMKill after a retry of the act's request
    (and before the next) is that request's, named with the restarts and the back-offs
    the pod's status gave; streams its kills cut are the act's, not the gateway's; a
    retry the engine answered (refused) is said, and no crash loop."""
    oom = dict(code=137, reason="OOMKilled")
    kw = dict(victims=["p1"], expect_broken_on_victims=True)

    def retry(n, t):
        return ev(t, "action", "p1", action="oom_request", context_tokens=400000, retry=n)

    events = [
        ev(T, "action", "p1", action="oom_request", context_tokens=400000, retry=0),
        ev(T + 0.3, "exited", "p1", restarts=0, **oom),
        ev(T + 0.3, "back_off", "p1", delay_s=0.5, restarts=1),
        retry(1, T + 5),
        ev(T + 5.2, "exited", "p1", restarts=1, **oom),
        ev(T + 5.2, "back_off", "p1", delay_s=1.0, restarts=2),
        ev(T + 5.2, "action", "p1", action="retry_seen", evidence="exited", retry=1),
        retry(2, T + 9),
        ev(T + 9.4, "exited", "p1", restarts=2, **oom),
        ev(T + 9.4, "action", "p1", action="retry_seen", evidence="exited", retry=2),
    ]
    cut = rec("cut", "reset", sent=T + 4, dur=1.3, pod="p1")  # in flight at retry 1's kill
    later = rec("later", "reset", sent=T + 7, dur=0.5, pod="p1")  # cut by nothing retried
    d = data([rec("a", sent=T - 3, dur=1), cut, later], events, **kw)
    r = C.oom_killed_once(d)
    assert status(r) == "fail", r.observed
    assert "sent 2 times more as a client retries one that got no answer" in r.observed
    assert "OOMKilled the restarted engine 2 more times (restarts 2" in r.observed
    assert (
        "back-off 0.5 s, 1 s)" in r.observed and "a crash loop caused by one request" in r.observed
    )
    assert "under the load" not in r.observed and "max_model_len" in r.hint
    assert d.struck(cut) and not d.struck(later)
    # the retry refused (a context above max_model_len after all): said, no crash loop
    answered = events[:4] + [
        ev(T + 5.1, "action", "p1", action="oom_answer", outcome="http_error", status=400, retry=1)
    ]
    r = C.oom_killed_once(data([rec("a", sent=T - 3, dur=1)], answered, **kw))
    assert status(r) == "pass" and "retry 1 answered HTTP 400 (http_error)" in r.observed
    # an OOMKill with no retry before it is the load's, as before
    load = events[:3] + [ev(T + 6, "exited", "p2", **oom)]
    r = C.oom_killed_once(data([rec("a", sent=T - 3, dur=1)], load, **kw))
    assert status(r) == "fail" and "1 more OOMKills under the load (p2)" in r.observed


def test_traefik_json_lines_as_measured_on_kube_local(tmp_path):
    """Traefik v3.6's JSON access log (a line as its Gateway provider wrote it on
    kube-local, docs/facts.md): the pod from ServiceAddr, Duration in nanoseconds from
    StartUTC, the id from the X-Request-Id header it was told to keep; a client that left
    first is its 499."""
    from harness.gateway_logs import read_access_log

    line = {
        "ClientHost": "127.0.0.1",
        "DownstreamContentSize": 141,
        "DownstreamStatus": 200,
        "Duration": 2191413000,
        "OriginStatus": 200,
        "RequestMethod": "POST",
        "RequestPath": "/v1/chat/completions",
        "RouterName": "httproute-gw-chat-gw-gw-inference-gateway-ep-web-0-a431b@kubernetesgateway",
        "ServiceAddr": "10.244.2.3:8000",
        "ServiceName": "gw-sim-canary-http-8000@kubernetesgateway",
        "ServiceURL": "http://10.244.2.3:8000",
        "StartUTC": "2026-12-06T07:05:57.607566989Z",
        "request_X-Request-Id": "req-7",
        "level": "info",
    }
    gone = line | {"DownstreamStatus": 499, "request_X-Request-Id": "req-8"}
    log = tmp_path / "access.log"
    log.write_text(json.dumps(line) + "\n" + json.dumps(gone) + "\n")
    (ok, left), unparsed = read_access_log(log)
    assert (ok.request_id, ok.status, ok.upstream_addr, ok.upstream_status) == (
        "req-7",
        200,
        "10.244.2.3:8000",
        "200",
    )
    assert ok.request_time_s == pytest.approx(2.191413)
    assert ok.start_t == pytest.approx(1796540757.607567)
    assert (left.request_id, left.status) == ("req-8", 499) and unparsed.count == 0
