"""What broke each stream: the event named in the report and the failure message."""

from __future__ import annotations

import pytest

from harness.events import Event
from harness.streams import StreamRecord
from harness.timeline import breaking_event
from harness.verdict import describe_break

pytestmark = pytest.mark.unit

T = 1_000.0


def rec(start: float, end: float, pod: str | None = "a") -> StreamRecord:
    return StreamRecord("r", "aborted", T + start, end - start, status=200, pod=pod)


def ev(t: float, kind: str, pod: str = "a", **detail) -> Event:
    return Event(T + t, kind, pod, None, "v1", detail)


EVENTS = [
    ev(-50, "ready"),
    ev(0, "endpoint_removed"),
    ev(0.2, "prestop_started"),
    ev(5, "sigterm", estimated=True),
    ev(9, "sigkill"),
    ev(3, "sigterm", pod="b"),
]


def test_the_signal_that_cut_it_not_the_prestop_before_or_the_kill_after():
    got = breaking_event(rec(-2, 5.01), sorted(EVENTS, key=lambda e: e.t))
    assert (got.kind, got.pod, got.t) == ("sigterm", "a", T + 5)
    assert describe_break(rec(-2, 5.01), got, T) == "sigterm (estimated) on a at +5.00 s"


def test_a_request_sent_to_a_pod_already_going_away_names_what_came_before_it():
    got = breaking_event(rec(6, 6.1), EVENTS)  # refused after the SIGTERM
    assert got.kind == "sigterm" and got.t == T + 5


def test_a_restarted_container_is_not_blamed_for_its_earlier_death():
    events = EVENTS + [ev(20, "ready")]
    assert breaking_event(rec(30, 31), events) is None


def test_an_untraced_stream_is_tied_to_a_victim_only_if_in_flight_at_its_signal():
    events = sorted(EVENTS, key=lambda e: e.t)
    got = breaking_event(rec(4, 6, pod=None), events, victims=["a"])
    assert got.kind == "sigterm" and got.pod == "a"  # the signal, not the endpoint removal
    assert "not traced to a pod" in describe_break(rec(4, 6, pod=None), got, T)
    assert breaking_event(rec(6, 7, pod=None), events, victims=["a"]) is None  # after it
    assert breaking_event(rec(4, 6, pod=None), events, victims=[]) is None  # no victim named


def test_a_kill_is_blamed_not_the_endpoint_removal_that_followed_it():
    """pod_kill on the local target: the SIGKILL at +0.00 s cuts the stream, the gateway
    drops the endpoint 10 ms later; the report named the endpoint removal."""
    events = [ev(-50, "ready"), ev(0.0, "sigkill"), ev(0.01, "endpoint_removed")]
    got = breaking_event(rec(-2, 0.005), events)
    assert (got.kind, got.t) == ("sigkill", T)
    # an endpoint removed first and a SIGTERM after it: the signal, as before
    drain = [ev(-50, "ready"), ev(0.0, "endpoint_removed"), ev(1.0, "sigterm")]
    assert breaking_event(rec(-2, 1.02), drain).kind == "sigterm"


def test_the_local_autoscalers_decision_is_in_the_scalers_table():
    """scale_to_zero on the local target: the hand-over and the autoscaler's removal both
    show (the decisions table omitted the removal)."""
    from harness.timeline import scaler_timeline

    events = [
        ev(0, "action", pod=None, action="autoscaler", policy="inflight"),
        ev(16, "scale", pod=None, replicas_from=1, replicas_to=0, by="autoscaler (inflight)"),
        ev(20, "scale", pod=None, replicas_from=0, replicas_to=3, by="user"),  # the harness's
    ]
    rows = scaler_timeline(events, T)
    assert [r["what"] for r in rows] == [
        "the count handed to the scaler (inflight)",
        "the autoscaler (inflight) set replicas 1 -> 0",
    ]
    assert rows[1]["at_s"] == 16


def test_one_reading_of_each_pods_life():
    """pod_lives: what the report's pod lanes, the start-up check, a rollout's measured
    pod times, a canary's candidates and the scaler's new replicas all read. A restarted
    container's second ready is not its start-up; the local target's container start
    counts from before the pod's creation event; a version first said on a later event
    is the pod's."""
    from harness.timeline import pod_lives, pods_ready_of

    events = [
        Event(T + 0, "container_started", "a", None, None, {}),
        Event(T + 0.5, "pod_created", "a", "node-1", "v2", {"address": "10.0.0.1:80"}),
        Event(T + 12, "ready", "a", None, "v2", {}),
        Event(T + 20, "exited", "a", None, "v2", {}),
        Event(T + 31, "ready", "a", None, "v2", {}),
        Event(T + 40, "terminating", "a", None, "v2", {}),
        Event(T + 45, "pod_removed", "a", None, "v2", {}),
        Event(T + 41, "pod_created", "b", None, "v1", {}),
    ]
    a, b = pod_lives(events)
    assert (a.pod, a.version, a.node) == ("a", "v2", "node-1")
    assert a.start == T and a.ready == T + 12 and a.startup_s == 12
    assert a.ready_from(T + 13) == T + 31
    assert (a.terminating, a.removed) == (T + 40, T + 45)
    assert b.ready is None and b.startup_s is None and b.created == T + 41
    # ready before `until`, not removed before `since`
    assert pods_ready_of(events, "v2", since=T + 44, until=T + 50) == ["a"]
    assert pods_ready_of(events, "v2", since=T + 46, until=T + 50) == []
    assert pods_ready_of(events, "v2", since=T, until=T + 11) == []
