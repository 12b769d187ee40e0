"""Timestamped cluster events and scenario actions, on the wall clock of the logs."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.files import open_append


@dataclass
class Event:
    t: float  # epoch seconds
    kind: str  # pod_created, ready, sigterm, sigkill, exited, endpoint_removed, action, ...
    pod: str | None = None
    node: str | None = None
    version: str | None = None
    detail: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


class EventLog:
    """Thread-safe, append-only; mirrored to events.jsonl as it grows."""

    def __init__(self, path: Path | None = None):
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._file = open_append(path) if path else None

    def emit(
        self, kind: str, pod=None, node=None, version=None, t: float | None = None, **detail
    ) -> Event:
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
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                out.append(Event(**json.loads(line)))
    return out
