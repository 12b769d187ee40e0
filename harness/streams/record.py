"""StreamRecord: one request, as the client saw it, plus what correlation adds later."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.files import MAX_LOG_BYTES, BadInput, atomic, read_lines
from harness.streams.gateway_line import GatewayLine, typed_fields


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


_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_FIELD_TYPES = {
    "request_id": (str,),
    "outcome": (str,),
    "sent_at": _NUM,
    "duration_s": _NUM,
    "status": (int, type(None)),
    "headers_s": _OPT_NUM,
    "ttft_s": _OPT_NUM,
    "last_event_s": _OPT_NUM,
    "done": (bool,),
    "flags": (list,),
    "tokens": (int,),
    "usage": (dict, type(None)),
    "itl_max_s": _OPT_NUM,
    "itl_p50_s": _OPT_NUM,
    "itl_p99_s": _OPT_NUM,
    "events": (int,),
    "comments": (int,),
    "bytes": (int,),
    "skew_p50_s": _OPT_NUM,
    "skew_p99_s": _OPT_NUM,
    "tags": (dict,),
    "pieces": (list, type(None)),
    "gateway": (dict, type(None)),
}
_TEXT = (str, type(None))  # every other field is text or null
BROKEN = frozenset(Outcome) - {Outcome.COMPLETE, Outcome.CANCELLED}
_OUTCOMES = frozenset(o.value for o in Outcome)
FLAGS = ("ttft_slo_breach", "itl_slo_breach", "empty")


@dataclass
class StreamRecord:
    request_id: str
    outcome: Outcome
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
    gateway: GatewayLine | None = None  # its line in the gateway's access log
    traced_by: str | None = None  # how the pod was told (harness.timeline.TRACED_BY_*)
    # a Content-Encoding the server used though identity was asked for (gzip, deflate),
    # decoded before judging; an encoding rollcheck cannot decode is not_sse, named
    content_encoding: str | None = None

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
        """A record read back (a run folder may have been edited by hand): every field of
        the type rollcheck writes, or ValueError naming the first that is not."""
        if not isinstance(d, dict):
            raise ValueError(f"a JSON {type(d).__name__}, not an object")
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            kwargs = typed_fields({k: v for k, v in d.items() if k in names}, _FIELD_TYPES, _TEXT)
        except ValueError as exc:
            raise ValueError(f"field {exc}") from None
        for name in ("request_id", "outcome", "sent_at", "duration_s"):
            if name not in kwargs:
                raise ValueError(f"no field {name}")
        if kwargs["outcome"] not in _OUTCOMES:
            raise ValueError(
                f"field outcome is {kwargs['outcome'][:40]!r}, not one of {', '.join(Outcome)}"
            )
        kwargs["outcome"] = Outcome(kwargs["outcome"])
        if kwargs.get("gateway") is not None:
            try:
                kwargs["gateway"] = GatewayLine.from_dict(kwargs["gateway"])
            except ValueError as exc:
                raise ValueError(f"field gateway: {exc}") from None
        return cls(**kwargs)


def write_jsonl(records: Iterable[StreamRecord], path: Path) -> int:
    n = 0
    with atomic(path) as f:
        for r in records:
            f.write(r.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: Path, limit: int = MAX_LOG_BYTES) -> Iterator[StreamRecord]:
    """The records of a records.jsonl, one bounded line at a time (harness/files.py)."""
    for lineno, line in read_lines(path, limit):
        try:
            yield StreamRecord.from_dict(json.loads(line))
        except (ValueError, TypeError) as exc:
            raise BadInput(f"{path}:{lineno}: not a stream record ({exc})") from None
