"""Timestamped cluster events and scenario actions, on the wall clock of the logs."""

from __future__ import annotations

import enum
import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.files import BadInput, open_append, read_lines


class EventKind(enum.StrEnum):
    """What an event says happened: every kind a target or a scenario writes. A kind not
    listed here is refused where events are written and read (a typo in a check's kind
    would otherwise never match, silently)."""

    # the scenario's own steps and acts (detail["action"] says which)
    ACTION = "action"
    # a pod's life
    POD_CREATED = "pod_created"
    CONTAINER_STARTED = "container_started"  # the local target's engine process started
    STARTED = "started"  # its startup probe passed (the local target)
    WAITING_TO_START = "waiting_to_start"  # a restart held back by the kubelet's back-off
    BACK_OFF = "back_off"
    PROBE_FAILED = "probe_failed"
    READY = "ready"
    UNREADY = "unready"
    TERMINATING = "terminating"
    PRESTOP_STARTED = "prestop_started"
    SIGTERM = "sigterm"
    SIGNAL = "signal"  # another signal (a kill by scenario.kill_signal)
    SIGKILL = "sigkill"
    EXITED = "exited"
    POD_REMOVED = "pod_removed"
    PREEMPTED = "preempted"
    EVICTED = "evicted"
    EVICTION_REFUSED = "eviction_refused"
    DELETED = "deleted"
    DELETION_COST = "deletion_cost"
    # the Service's endpoints and the gateway
    ENDPOINT_ADDED = "endpoint_added"
    ENDPOINT_REMOVED = "endpoint_removed"
    GATEWAY_UPDATED = "gateway_updated"
    GATEWAY_LOG_FOLLOWED = "gateway_log_followed"
    ENGINE_LOG_UNREADABLE = "engine_log_unreadable"
    ENGINE_CONTAINER = "engine_container"  # which container of the pod is the engine
    # nodes
    CORDONED = "cordoned"
    UNCORDONED = "uncordoned"
    NODE_LOST = "node_lost"
    NODE_READY = "node_ready"
    NODE_NOT_READY = "node_not_ready"
    NODE_TAINTS = "node_taints"
    NODE_UNREADABLE = "node_unreadable"
    NODE_STOP_FAILED = "node_stop_failed"
    TAINT_EVICTION = "taint_eviction"
    # the workload: rollouts, replicas, scalers
    ROLLOUT_STARTED = "rollout_started"
    ROLLOUT_STEP = "rollout_step"
    ROLLOUT_COMPLETE = "rollout_complete"
    CANARY_HELD = "canary_held"
    REPLICASET = "replicaset"
    REPLICAS_CHANGED = "replicas_changed"
    CAPACITY = "capacity"
    SCALE = "scale"
    SCALER_STATUS = "scaler_status"
    SCALER_FOUGHT = "scaler_fought"
    SCALER_HELD = "scaler_held"
    WORKLOAD_SCALERS = "workload_scalers"
    AUTOSCALER_DECISION = "autoscaler_decision"
    AUTOSCALER_HANDED_BACK = "autoscaler_handed_back"
    OWNED = "owned"  # the workload's owner (an operator) found
    RESTORED = "restored"
    K8S_EVENT = "k8s_event"  # a Kubernetes Event of the workload's objects


@dataclass
class Event:
    t: float  # epoch seconds
    kind: EventKind
    pod: str | None = None
    node: str | None = None
    version: str | None = None
    detail: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


KINDS = frozenset(k.value for k in EventKind)


class EventLog:
    """Thread-safe, append-only; mirrored to events.jsonl as it grows."""

    def __init__(self, path: Path | None = None):
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._file = open_append(path) if path else None

    def emit(
        self,
        kind: EventKind | str,
        pod=None,
        node=None,
        version=None,
        t: float | None = None,
        **detail,
    ) -> Event:
        kind = EventKind(kind)  # ValueError: a kind rollcheck does not know (a typo)
        ev = Event(time.time() if t is None else t, kind, pod, node, version, detail)
        with self._lock:
            self._events.append(ev)
            if self._file:
                self._file.write(ev.to_json() + "\n")
                self._file.flush()
        return ev

    def all(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None


def read_events(path: Path) -> list[Event]:
    """events.jsonl read back, one bounded line at a time; a line that is not an event
    rollcheck writes is one BadInput line naming it."""
    out = []
    for n, line in read_lines(path):
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValueError(f"a JSON {type(d).__name__}, not an object")
            ev = Event(**d)
            if isinstance(ev.t, bool) or not isinstance(ev.t, (int, float)):
                raise ValueError("t is not a number")
            if not isinstance(ev.kind, str) or not isinstance(ev.detail, dict):
                raise ValueError("kind is not text or detail not an object")
            if ev.kind not in KINDS:
                raise ValueError(f"kind {ev.kind[:40]!r} is not one rollcheck writes")
            ev.kind = EventKind(ev.kind)
            for name in ("pod", "node", "version"):
                if not isinstance(getattr(ev, name), (str, type(None))):
                    raise ValueError(f"{name} is not text")
        except (TypeError, ValueError) as exc:
            raise BadInput(f"{path}:{n}: not a rollcheck event ({exc})") from None
        out.append(ev)
    return out
