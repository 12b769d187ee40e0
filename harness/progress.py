"""What a scenario is doing as it happens: phase lines, and a status while it waits.

Phase lines go through the `rollcheck` logger at INFO, one line per step, with the time
since the scenario started: "test_drain[pod] +12.4s act: evicting rollcheck-sim-v1-1".
The scenario's own steps say where it is (settling, steady state, cool-down, stopping the
load, judging); the target's events say what the cluster did (SIGTERM, an endpoint
removed, a new pod ready, the scaler's decision, a PDB refusal), followed as they come.
pytest's live logging (-o log_cli=true) prints them and its captured log keeps them; the
plugin prints them itself when live logging is off (harness.pytest_plugin).

Every bounded wait (harness.waits) tells the scenario's Progress what it waits for and
until when; on the scenario's own thread the outermost one is "the wait", and the time
spent in such waits is the scenario's waiting share. While a wait runs, a status line
says what is waited for, how long of its bound has passed, and the load's figures:
rewritten in place on a terminal (`status`, the plugin's), a plain INFO line every
ui.progress_every_s elsewhere (CI logs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from harness import waits
from harness.events import EventKind

log = logging.getLogger("rollcheck")

FOLLOW_S = 0.5  # how often the target's events are read for phase lines
TTY_STATUS_S = 1.0  # how often the terminal's status line is drawn
REPEAT_S = 10.0  # the same event of the same pod again within this: not a new line
CLOSING = {
    EventKind.RESTORED,
    EventKind.UNCORDONED,
}  # news while the target stops (the rest is its teardown)
# events after which a pod no longer serves (for the count of ready pods)
GONE = {
    EventKind.UNREADY,
    EventKind.TERMINATING,
    EventKind.PRESTOP_STARTED,
    EventKind.SIGTERM,
    EventKind.SIGKILL,
    EventKind.EXITED,
    EventKind.POD_REMOVED,
    EventKind.DELETED,
    EventKind.EVICTED,
}


def clock(seconds: float) -> str:
    """A duration as a person reads it: 45s, 2m10s, 1h05m."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _pod(e) -> str:
    return e.pod or "?"


def _action(e) -> str | None:
    d = e.detail
    kind = d.get("action")
    if kind in ACTION_LINES:
        return ACTION_LINES[kind](e, d)
    return None


ACTION_LINES: dict[str, Callable] = {
    "rollout": lambda e, d: (
        f"act: a candidate of {d.get('to_version')} beside the baseline: one replica, no traffic yet"
        if d.get("weighted")
        else f"act: a canary of {d.get('to_version')}, held at one replica until judged"
        if d.get("canary")
        else f"act: rolling the {' and '.join(d['roles'])} role"
        + ("s" if len(d["roles"]) > 1 else "")
        + f" out to {d.get('to_version')}"
        if d.get("roles")
        else f"act: rolling out {d.get('to_version') or e.version or ''}"
        + (f" ({d['max_surge']}/{d['max_unavailable']})" if "max_surge" in d else "")
    ),
    "canary_promote": lambda e, d: "the canary is promoted: the rollout goes on",
    "canary_weight": lambda e, d: (
        f"the gateway's weight for {e.version or d.get('version')}: {d['percent']:g}% of the requests"
        if isinstance(d.get("percent"), (int, float))
        else "the gateway routes to every replica alike again"
    ),
    "candidate_scale": lambda e, d: f"the candidate scaled to {d.get('replicas')} replicas",
    "mirror": lambda e, d: (
        f"the gateway mirrors {d['percent']:g}% of the requests to {e.version or d.get('version')}"
        if d.get("percent")
        else "the gateway mirrors nothing"
    ),
    "canary_rollback": lambda e, d: "the canary is rolled back to the baseline's template",
    "evict": lambda e, d: f"act: evicting {_pod(e)}",
    "drain_node": lambda e, d: f"act: draining node {e.node or d.get('node', '?')}",
    "kill": lambda e, d: f"act: {d.get('signal', 'kill')} to {_pod(e)}",
    "delete": lambda e, d: f"act: deleting {_pod(e)}",
    "scale": lambda e, d: (
        f"scaling to {d.get('replicas')} replica" + ("" if d.get("replicas") == 1 else "s")
    ),
    "scale_down": lambda e, d: f"act: scaling down, removing {_pod(e)}",
    "autoscaler": lambda e, d: f"act: the autoscaler set to {d.get('policy', d)}",
    "load_step": lambda e, d: f"act: load step to {d.get('users')} users",
    "oom_request": lambda e, d: (
        (f"retry {d['retry']}: the same" if d.get("retry") else "act: a")
        + f" request of {d.get('context_tokens')} tokens of context to {_pod(e)}"
    ),
    "retry_seen": lambda e, d: (
        f"retry {d.get('retry')} killed {_pod(e)} again ({d.get('evidence')})"
    ),
    "preempt": lambda e, d: (
        f"act: a pod of priority {d.get('priority')} that fits only where {_pod(e)} runs "
        f"(node {e.node or d.get('node', '?')})"
    ),
    "preemptor_gone": lambda e, d: "the preemptor left: the replacement may be scheduled",
    "node_loss": lambda e, d: (
        f"act: node {e.node or d.get('node', '?')} stops as a power loss would "
        f"({len(d.get('pods') or [])} engine pods on it)"
    ),
    "node_returned": lambda e, d: f"node {e.node or d.get('node', '?')} is back",
    "adapter_load": lambda e, d: (
        f"adapter {d.get('adapter')} "
        + ("reloaded in place" if d.get("inplace") else "loaded")
        + f" on {_pod(e)} from {d.get('path')}"
    ),
    "adapter_unload": lambda e, d: f"adapter {d.get('adapter')} unloaded from {_pod(e)}",
    "adapter_share": lambda e, d: (
        f"{d.get('percent')}% of the adapter's requests now name {d.get('adapter')}"
    ),
    "node_not_back": lambda e, d: (
        f"node {e.node or d.get('node', '?')} not Ready {d.get('waited_s')} s after it came back"
    ),
    "act_seen": lambda e, d: f"the act took effect on {_pod(e)} ({d.get('evidence')})",
    "kill_seen": lambda e, d: (
        f"the kill of {_pod(e)} took effect ({d.get('evidence')}"
        + (f", {d['reason']}" if d.get("reason") else "")
        + ")"
    ),
    "recovered": lambda e, d: f"recovered: {d.get('replicas')} replicas ready and served",
    "not_recovered": lambda e, d: f"not recovered: {d.get('why')}",
    "replacement_served": lambda e, d: f"replacement {_pod(e)} served a complete stream",
    "queues_clear": lambda e, d: "the replicas' queues are clear",
    # (an event's version is its own field, not part of its detail)
    "rolled_out": lambda e, d: f"rolled out to {e.version}: {', '.join(d.get('pods', []))}",
    "scaler_removed": lambda e, d: f"the scaler's ReplicaSet removed {_pod(e)} ({d.get('why')})",
    "restored": lambda e, d: "restored what the scenario changed",
}


def _replicas_line(e) -> str:
    d = e.detail
    who = d.get("by") or d.get("scaler") or "the scaler"
    return f"replicas {d.get('replicas_from', '?')} -> {d.get('replicas_to', '?')} by {who}"


def _fought_line(e) -> str:
    d = e.detail
    held = f"held at {d['held']}" if d.get("held") is not None else f"during the {d.get('during')}"
    return (
        f"a scaler fought the harness: replicas {held} set to {d.get('replicas_to')} by "
        f"{d.get('by') or d.get('scaler') or 'an unnamed writer'}"
    )


def _hpa_line(e) -> str:
    d = e.detail
    limited = f", limited: {d['limited']}" if d.get("limited") else ""
    return f"HPA {d.get('hpa')} wants {d.get('desired')} replicas (has {d.get('current')}{limited})"


EVENT_LINES: dict[EventKind, Callable] = {
    EventKind.ACTION: _action,
    EventKind.SIGTERM: lambda e: f"SIGTERM to {_pod(e)}",
    EventKind.SIGKILL: lambda e: f"SIGKILL to {_pod(e)}",
    EventKind.EXITED: lambda e: (
        f"the engine of {_pod(e)} exited"
        + (f" ({e.detail['reason']})" if e.detail.get("reason") else "")
    ),
    EventKind.BACK_OFF: lambda e: (
        f"{_pod(e)} waits {e.detail.get('delay_s', '?'):g} s before its restart (CrashLoopBackOff)"
        if isinstance(e.detail.get("delay_s"), int | float)
        else f"{_pod(e)} waits before its restart (CrashLoopBackOff)"
    ),
    EventKind.TAINT_EVICTION: lambda e: (
        f"{_pod(e)} evicted: its toleration of {e.detail.get('taint')} ran out"
    ),
    EventKind.PREEMPTED: lambda e: (
        f"the scheduler preempted {_pod(e)} for a pod of higher priority"
    ),
    EventKind.NODE_NOT_READY: lambda e: (
        f"node {e.node} {e.detail.get('status')}: {e.detail.get('reason') or 'no reason given'}"
    ),
    EventKind.NODE_READY: lambda e: f"node {e.node} Ready",
    EventKind.NODE_TAINTS: lambda e: (
        f"node {e.node} tainted: {', '.join(e.detail.get('taints') or []) or 'none'}"
    ),
    EventKind.PRESTOP_STARTED: lambda e: f"preStop started on {_pod(e)}",
    EventKind.ENDPOINT_REMOVED: lambda e: f"endpoint of {_pod(e)} removed from the gateway",
    EventKind.EVICTION_REFUSED: lambda e: (
        f"the PodDisruptionBudget refused evicting {_pod(e)}; retrying"
    ),
    EventKind.EVICTED: lambda e: f"evicted {_pod(e)}",
    EventKind.CORDONED: lambda e: f"cordoned node {e.node}",
    EventKind.UNCORDONED: lambda e: f"uncordoned node {e.node}",
    EventKind.POD_CREATED: lambda e: f"pod {_pod(e)} created ({e.version})",
    EventKind.PROBE_FAILED: lambda e: f"a probe failed on {_pod(e)} ({e.detail.get('probe', '')})",
    EventKind.ROLLOUT_COMPLETE: lambda e: "the rollout completed",
    EventKind.REPLICAS_CHANGED: _replicas_line,
    EventKind.SCALER_FOUGHT: _fought_line,
    EventKind.SCALER_STATUS: _hpa_line,
    EventKind.AUTOSCALER_HANDED_BACK: lambda e: (
        "the replica count handed back to the workload's scaler"
    ),
    EventKind.SCALER_HELD: lambda e: (
        f"HPA {e.detail.get('hpa')} held at {e.detail.get('replicas')} (selectPolicy Disabled, "
        f"min {e.detail.get('minReplicas')}, max {e.detail.get('maxReplicas')})"
    ),
    EventKind.ENGINE_CONTAINER: lambda e: (
        f"the engine is container {e.detail.get('container')} (port {e.detail.get('port')}): "
        f"{e.detail.get('why')}"
    ),
    EventKind.OWNED: lambda e: f"WARNING: managed by {e.detail.get('owner')}; acting anyway",
    EventKind.CANARY_HELD: lambda e: (
        f"the rollout is held at one candidate pod of {e.version or e.detail.get('version')}"
    ),
    EventKind.RESTORED: lambda e: "restored what the scenario changed",
}


class Progress:
    """One scenario's progress, from when its target starts to its verdict."""

    def __init__(
        self,
        name: str,
        every_s: float = 30.0,
        status: Callable[[str], None] | None = None,
        clock_fn: Callable[[], float] = time.time,
    ):
        self.name = name
        self.every_s = every_s
        self.status = status  # a terminal's status line (rewritten in place), or None
        self._now = clock_fn
        self.t0 = clock_fn()
        self.target = None
        self.load = None
        self.desired: int | None = None  # the replicas the scenario expects, for "N of M"
        self._ready: set[str] = set()  # pods ready, as the events followed so far say
        self._owner = threading.current_thread()
        self._lock = threading.RLock()
        self._seen: set[int] = set()  # the events already followed (the log keeps them)
        self._stamped = self.t0  # the time of the last line (lines never go back in time)
        self.closing = False  # the target is being stopped: only its restore is news
        self._last: dict[tuple, float] = {}
        self._wait: tuple[str, float, float] | None = None  # what, since, bound
        self._depth = 0
        self._last_status = 0.0
        self.waited_s = 0.0
        self.waits: dict[str, float] = {}  # seconds spent waiting, by what was waited for
        self.t_end: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_watch = None

    # --- lines -----------------------------------------------------------------
    def stamp(self, t: float | None = None) -> str:
        return f"{self.name} +{(self._now() if t is None else t) - self.t0:.1f}s"

    def phase(self, text: str, t: float | None = None) -> None:
        """One phase line (the target's events up to now come first, in their order)."""
        with self._lock:
            self.follow()
            self._clear_status()
            self._stamped = max(self._stamped, self._now() if t is None else t)
            log.info("%s %s", self.stamp(self._stamped), text)

    def follow(self) -> None:
        """A line for each event of the target's that matters, since the last call."""
        target = self.target
        if target is None:
            return
        with self._lock:
            try:
                events = target.events()
            except Exception:  # a target going away: its next read, or none
                return
            # by identity, not by position: a target may sort its events by time (the
            # Kubernetes one does), so one stamped to the second lands among older ones
            new = [e for e in events if id(e) not in self._seen]
            self._seen.update(id(e) for e in new)
            for e in new:
                if e.t < self.t0 - 1.0:
                    continue  # what was there before the scenario (a watch's first list)
                if self.closing and e.kind not in CLOSING and e.detail.get("action") not in CLOSING:
                    continue
                describe = EVENT_LINES.get(e.kind)
                text = describe(e) if describe else None
                if e.pod and e.kind == EventKind.READY:
                    if e.pod in self._ready:
                        continue
                    self._ready.add(e.pod)
                    of = f" of {self.desired}" if self.desired is not None else ""
                    text = f"pod {e.pod} ready ({len(self._ready)}{of} ready)"
                elif e.pod and e.kind in GONE:
                    self._ready.discard(e.pod)
                if not text:
                    continue
                key = (e.kind, e.pod, e.detail.get("action"))
                if (
                    e.kind not in (EventKind.ACTION, EventKind.READY)
                    and e.t - self._last.get(key, -1e18) < REPEAT_S
                ):
                    continue  # the same again (a PDB's refusal retried, a watch's repeat)
                self._last[key] = e.t
                self._clear_status()
                # a cluster stamps to the second (a preStop's start is derived from its
                # deletion time): a line is never stamped before the one above it
                self._stamped = max(self._stamped, e.t)
                log.info("%s %s", self.stamp(self._stamped), text)

    def _ready_count(self) -> str:
        try:
            pods = self.target.pods()
        except Exception:
            return "?"
        ready = sum(1 for p in pods if p.ready and not p.terminating)
        return f"{ready} of {len(pods)} pods ready"

    # --- the status while waiting -------------------------------------------------
    def figures(self) -> str:
        """The load's figures so far, and the pods', for a status line."""
        parts = []
        load = self.load
        if load is not None:
            c = load.counts()
            parts.append(
                f"requests {c['sent']} sent, {c.get('complete', 0)} complete, "
                f"{c.get('broken', 0)} broken, {c['in_flight']} in flight"
            )
        if self.target is not None:
            parts.append(self._ready_count())
        return "; ".join(parts)

    def status_text(self) -> str | None:
        wait = self._wait
        if wait is None:
            return None
        what, since, bound = wait
        text = f"waiting for {what}: {clock(self._now() - since)} of {clock(bound)}"
        figures = self.figures()
        return f"{self.stamp()} {text}" + (f"; {figures}" if figures else "")

    def tick(self) -> None:
        """Follow the events; draw the status line on a terminal, or every every_s as a
        plain line elsewhere."""
        self.follow()
        if self._wait is None:
            return
        now = self._now()
        with self._lock:
            if self.status is not None:
                if now - self._last_status >= TTY_STATUS_S:
                    self._last_status = now
                    text = self.status_text()
                    if text:
                        self.status(text)
            elif self.every_s > 0 and now - self._last_status >= self.every_s:
                self._last_status = now
                text = self.status_text()
                if text:
                    log.info("%s", text)

    def _clear_status(self) -> None:
        if self.status is not None and self._wait is not None:
            self.status("")

    # --- waits (harness.waits tells of each) -----------------------------------------
    def begin(self, what: str, bound_s: float):
        """A wait starts; on the scenario's thread, the outermost one is the wait."""
        if threading.current_thread() is not self._owner:
            return None
        with self._lock:
            self._depth += 1
            if self._depth > 1:
                return None
            now = self._now()
            self._wait = (what, now, bound_s)
            # the first periodic line comes every_s into the wait, not at once
            self._last_status = now if self.status is None else 0.0
            return now

    def end(self, token) -> None:
        if threading.current_thread() is not self._owner:
            return
        with self._lock:
            self._depth = max(0, self._depth - 1)
            if token is None:
                return
            took = self._now() - token
            what = self._wait[0] if self._wait else ""
            self._clear_status()
            self._wait = None
            self.waited_s += took
            self.waits[what] = self.waits.get(what, 0.0) + took

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> Progress:
        """Follow the events and draw the status from a thread of its own; every wait of
        the process is told to this Progress until stop()."""
        self._previous_watch = waits.set_watch(self)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        period = min(FOLLOW_S, TTY_STATUS_S)
        while not self._stop.wait(period):
            try:
                self.tick()
            except Exception:  # progress is never a reason for a scenario to stop
                log.debug("progress tick failed", exc_info=True)

    def stop(self) -> None:
        self.follow()  # the restore's lines, say
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if waits.current_watch() is self:
            waits.set_watch(self._previous_watch)
        with self._lock:
            self._clear_status()

    def timing(self) -> dict:
        """Wall time so far, the time spent waiting and the longest wait: summary.json's
        "timing" and the session's last lines."""
        wall = (self.t_end or self._now()) - self.t0
        top = sorted(self.waits.items(), key=lambda kv: -kv[1])[:5]
        return {
            "wall_s": round(wall, 1),
            "waiting_s": round(self.waited_s, 1),
            "waiting_share": round(self.waited_s / wall, 3) if wall > 0 else None,
            "longest_wait": {"what": top[0][0], "s": round(top[0][1], 1)} if top else None,
            "waits": [{"what": what, "s": round(took, 1)} for what, took in top],
        }
