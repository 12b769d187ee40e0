"""StreamRecord: one request, as the client saw it, plus what correlation adds later."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.files import atomic


class Outcome(enum.StrEnum):
    COMPLETE = "complete"
    MISSING_DONE = "missing_done"
    TRUNCATED = "truncated"
    RESET = "reset"
    HUNG = "hung"
    ABORTED = "aborted"
    ERROR_EVENT = "error_event"
    HTTP_ERROR = "http_error"
    CONNECT_ERROR = "connect_error"
    NOT_SSE = "not_sse"
    CANCELLED = "cancelled"


BROKEN = frozenset(Outcome) - {Outcome.COMPLETE, Outcome.CANCELLED}
FLAGS = ("ttft_slo_breach", "itl_slo_breach", "empty")


@dataclass
class StreamRecord:
    request_id: str
    outcome: str
    sent_at: float  # epoch seconds, for joining with gateway logs
    duration_s: float  # send -> end, monotonic
    status: int | None = None
    content_type: str | None = None
    headers_s: float | None = None  # send -> response headers
    ttft_s: float | None = None  # send -> first content event
    last_event_s: float | None = None  # send -> last data event
    finish_reason: str | None = None
    done: bool = False
    flags: list[str] = field(default_factory=list)
    tokens: int = 0  # content events received
    usage: dict | None = None
    itl_max_s: float | None = None
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None
    response_id: str | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    error: str | None = None  # error event message, HTTP body excerpt or exception
    events: int = 0  # data events
    comments: int = 0
    bytes: int = 0
    skew_p50_s: float | None = None  # only when the server stamps chunks (benchmarks)
    skew_p99_s: float | None = None
    tags: dict = field(default_factory=dict)  # load-generator labels: user class, length class
    # the answer's content, one piece per content event (kept only when asked: canary)
    pieces: list[str] | None = None
    # filled by correlation with the gateway and the cluster
    pod: str | None = None
    version: str | None = None
    gateway: dict | None = None

    @property
    def ended_at(self) -> float:
        return self.sent_at + self.duration_s

    @property
    def broken(self) -> bool:
        return self.outcome in BROKEN

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        if d["pieces"] is None:
            del d["pieces"]  # the load's records do not keep their answers
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict) -> StreamRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def write_jsonl(records: Iterable[StreamRecord], path: Path) -> int:
    n = 0
    with atomic(path) as f:
        for r in records:
            f.write(r.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: Path) -> Iterator[StreamRecord]:
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield StreamRecord.from_dict(json.loads(line))
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{path}:{lineno}: not a stream record ({exc})") from None
