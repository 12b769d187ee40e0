"""Incremental Server-Sent Events parser over raw byte chunks.

Follows the WHATWG event-stream rules: lines end in CRLF, LF or CR; `data:`
with or without one leading space; several data lines join with "\\n"; a line
starting with ":" is a comment; a blank line dispatches the event. Unlike a
browser, a pending event is still delivered when the stream ends without a
blank line, so a server that forgets the last blank line is still judged.

Memory is bounded: a line, or an event's data, over `max_event_bytes` raises
EventTooLarge; the caller judges the stream and reads no further.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_EOL = re.compile(rb"\r\n|\r|\n")
MAX_EVENT_BYTES = 1 << 20  # far above any real chunk (a vLLM delta is well under 1 KiB)
EVENT_LIMIT_RANGE = (1024, 1 << 30)  # what a user may set the limit to


def event_limit_problem(value) -> str | None:
    """Why `value` cannot be the event limit ("must be 1024 to ..."), or None."""
    low, high = EVENT_LIMIT_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return f"must be {low} to {high}, not {value!r}"
    return None


class EventTooLarge(ValueError):
    """A line or an event is over the parser's limit."""


class SSEEvent(NamedTuple):
    """One dispatched event (data is None for a comment). A tuple: made for every event,
    it costs a third of a frozen dataclass."""

    t: float
    data: str | None = None
    event: str | None = None
    comment: str | None = None


class SSEParser:
    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._event_bytes = 0  # data bytes of the event being built
        self._buf = bytearray()
        self._scan = 0  # where to continue looking for a line end
        self._data: list[str] = []
        self._event: str | None = None

    def feed(self, chunk: bytes, t: float) -> list[SSEEvent]:
        """Parse a chunk that arrived at time t; return the events it completed."""
        self._buf += chunk
        if 0x0D in self._buf:  # a CR: lines may end in CR, CRLF or LF
            return self._feed_any(t)
        # every line ends in LF (what vLLM and every gateway measured send): the same
        # rules, with a data line read here rather than through _line
        out: list[SSEEvent] = []
        buf = self._buf
        find = buf.find
        start = 0
        while (end := find(b"\n", start)) >= 0:
            if end == start:  # a blank line: _dispatch, inline
                if self._data:
                    data = self._data
                    text = data[0] if len(data) == 1 else "\n".join(data)
                    out.append(SSEEvent(t, text, self._event))
                    self._data = []
                self._event = None
                self._event_bytes = 0
            elif buf.startswith(b"data:", start):
                self._event_bytes += end - start
                if self._event_bytes > self.max_event_bytes:
                    raise EventTooLarge(f"event over {self.max_event_bytes} bytes")
                first = start + 6 if buf[start + 5 : start + 6] == b" " else start + 5
                self._data.append(buf[first:end].decode("utf-8", errors="replace"))
            else:
                self._line(bytes(buf[start:end]), t, out)
            start = end + 1
        del buf[:start]
        self._scan = len(buf)  # no line end left in it
        if len(buf) > self.max_event_bytes:
            raise EventTooLarge(f"event over {self.max_event_bytes} bytes (a line with no end)")
        return out

    def _feed_any(self, t: float) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        buf = self._buf
        start = 0
        pos = self._scan
        n = len(buf)
        while True:
            m = _EOL.search(buf, pos)
            if m is None:
                pos = n
                break
            if m.end() == n and buf[m.start()] == 0x0D and m.end() - m.start() == 1:
                pos = m.start()  # a CR at the end may be half of a CRLF: wait for the next chunk
                break
            self._line(bytes(buf[start : m.start()]), t, out)
            start = pos = m.end()
        del buf[:start]
        self._scan = pos - start
        if len(buf) > self.max_event_bytes:
            raise EventTooLarge(f"event over {self.max_event_bytes} bytes (a line with no end)")
        return out

    def close(self, t: float) -> list[SSEEvent]:
        """The stream ended cleanly: deliver what is pending."""
        out: list[SSEEvent] = []
        if self._buf:
            self._line(bytes(self._buf.rstrip(b"\r")), t, out)
            self._buf.clear()
            self._scan = 0
        self._dispatch(t, out)
        return out

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)

    def _line(self, raw: bytes, t: float, out: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(t, out)
            return
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            out.append(SSEEvent(t=t, comment=line[1:].lstrip(" ")))
            return
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._event_bytes += len(raw)
            if self._event_bytes > self.max_event_bytes:
                raise EventTooLarge(f"event over {self.max_event_bytes} bytes")
            self._data.append(value)
        elif field == "event":
            self._event = value
        # `id` and `retry` do not matter to a single streamed answer.

    def _dispatch(self, t: float, out: list[SSEEvent]) -> None:
        if self._data:
            out.append(SSEEvent(t=t, data="\n".join(self._data), event=self._event))
        self._data = []
        self._event_bytes = 0
        self._event = None
