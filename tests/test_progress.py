"""A scenario's progress as a user reads it: phase lines from what the target shows, the
status of a wait at its period, and the share of the run spent waiting."""

from __future__ import annotations

import logging
import threading

import pytest

from harness.events import Event
from harness.progress import Progress, clock
from harness.waits import hold, wait_until

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Pod:
    def __init__(self, name, ready=True):
        self.name, self.ready, self.terminating = name, ready, False


class Target:
    """What Progress reads of a target: its events and its pods."""

    def __init__(self, events, pods=()):
        self._events, self._pods = events, list(pods)

    def events(self):
        return list(self._events)

    def pods(self):
        return self._pods


class Load:
    def counts(self):
        return {"sent": 40, "finished": 31, "in_flight": 9, "complete": 29, "broken": 2}


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rollcheck"]


def test_phase_lines_follow_the_targets_events_in_their_order(caplog):
    caplog.set_level(logging.INFO, "rollcheck")
    now = Clock(1000.0)
    events = [
        Event(990.0, "pod_created", pod="p-1", version="v1"),  # before the scenario: not news
        Event(1000.5, "action", pod="p-1", detail={"action": "evict"}),
        Event(1000.6, "eviction_refused", pod="p-1"),
        Event(1001.0, "pod_created", pod="p-4", version="v1"),
        Event(1001.6, "eviction_refused", pod="p-1"),  # a retry: not a new line
        # a cluster stamps to the second: a preStop derived from its deletion time comes
        # stamped before the line above it, and is said at that line's time
        Event(1000.8, "prestop_started", pod="p-1"),
        Event(1002.0, "endpoint_removed", pod="p-1"),
        Event(1002.1, "sigterm", pod="p-1"),
        Event(1002.2, "action", detail={"action": "health_probe", "status": 200}),  # not news
        Event(1003.0, "ready", pod="p-4"),
        Event(
            1003.5,
            "replicas_changed",
            detail={"replicas_from": 2, "replicas_to": 1, "by": "keda-operator"},
        ),
    ]
    p = Progress("test_drain[pod]", clock_fn=now)
    p.target, p.desired = Target(events), 3
    now.t = 1004.0
    p.phase("cool-down: 2 s more of load")
    assert lines(caplog) == [
        "test_drain[pod] +0.5s act: evicting p-1",
        "test_drain[pod] +0.6s the PodDisruptionBudget refused evicting p-1; retrying",
        "test_drain[pod] +1.0s pod p-4 created (v1)",
        "test_drain[pod] +1.0s preStop started on p-1",
        "test_drain[pod] +2.0s endpoint of p-1 removed from the gateway",
        "test_drain[pod] +2.1s SIGTERM to p-1",
        "test_drain[pod] +3.0s pod p-4 ready (1 of 3 ready)",
        "test_drain[pod] +3.5s replicas 2 -> 1 by keda-operator",
        "test_drain[pod] +4.0s cool-down: 2 s more of load",
    ]
    caplog.clear()
    p.follow()  # nothing new: no line twice
    assert lines(caplog) == []


def test_a_wait_is_said_at_its_period_off_a_terminal(caplog):
    caplog.set_level(logging.INFO, "rollcheck")
    now = Clock(0.0)
    p = Progress("test_pod_kill", every_s=30, clock_fn=now)
    p.target, p.load = Target([], [Pod("a"), Pod("b", ready=False)]), Load()
    token = p.begin("a replacement pod", 1800)
    for t in range(0, 100, 5):
        now.t = float(t)
        p.tick()
    p.end(token)
    assert lines(caplog) == [
        f"test_pod_kill +{t}.0s waiting for a replacement pod: {clock(t)} of 30m00s; requests "
        "40 sent, 29 complete, 2 broken, 9 in flight; 1 of 2 pods ready"
        for t in (30, 60, 90)
    ]


def test_on_a_terminal_the_status_is_drawn_in_place_and_cleared(caplog):
    drawn: list[str] = []
    now = Clock(0.0)
    p = Progress("s", clock_fn=now, status=drawn.append)
    token = p.begin("the rollout", 600)
    now.t = 130.0
    p.tick()
    p.end(token)
    assert drawn == ["s +130.0s waiting for the rollout: 2m10s of 10m00s", ""]
    assert lines(caplog) == []  # the terminal's line is not a log line


def test_the_waiting_share_counts_the_scenarios_own_outermost_waits():
    p = Progress("s").start()
    try:
        hold(0.2, what="the warm-up")
        # a wait inside a wait counts once, under the outer one's name
        wait_until(lambda: hold(0.1, what="inner") or True, 1, "the outer wait")
        other = threading.Thread(target=hold, args=(0.3,), kwargs={"what": "a poller"})
        other.start()
        other.join()  # another thread's waits are not the scenario's
    finally:
        p.stop()
    timing = p.timing()
    waits = {w["what"]: w["s"] for w in timing["waits"]}
    assert set(waits) == {"the warm-up", "the outer wait"}
    assert waits["the warm-up"] >= 0.2 and waits["the outer wait"] >= 0.1
    assert 0 < timing["waiting_share"] <= 1
    assert timing["wall_s"] >= timing["waiting_s"]


def test_clock_reads_as_a_person_reads_a_duration():
    assert [clock(s) for s in (0.4, 45, 130, 3600, 3 * 3600 + 5 * 60)] == [
        "0s",
        "45s",
        "2m10s",
        "1h00m",
        "3h05m",
    ]


def test_every_line_of_an_event_names_its_version_never_none():
    """An event's version is its own field (EventLog.emit takes it apart from the
    detail): the rollout's lines read it there ("rolled out to None" before)."""
    from harness.events import EventLog
    from harness.progress import EVENT_LINES

    log = EventLog(None)
    for ev in (
        log.emit("action", action="rolled_out", version="v2", pods=["p-1", "p-2"]),
        log.emit("action", action="rollout", version="v2", max_surge=1, max_unavailable=0),
    ):
        line = EVENT_LINES["action"](ev)
        assert "v2" in line and "None" not in line, line
