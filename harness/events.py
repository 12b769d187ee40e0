"""Timestamped cluster events and scenario actions, on the wall clock of the logs."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.files import BadInput, open_append, read_lines


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
            for name in ("pod", "node", "version"):
                if not isinstance(getattr(ev, name), (str, type(None))):
                    raise ValueError(f"{name} is not text")
        except (TypeError, ValueError) as exc:
            raise BadInput(f"{path}:{n}: not a rollcheck event ({exc})") from None
        out.append(ev)
    return out
