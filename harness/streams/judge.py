"""Judging one streamed answer: timed byte chunks in, a StreamRecord out.

StreamObserver is fed chunks as they arrive; `finish(end)` classifies. No I/O:
the client (harness/client.py) and the rule-table tests drive it the same way.
Rules come from vLLM's wire format (shared/facts.md):
- an error object in the stream is error_event, even when [DONE] follows;
- finish_reason "abort" is aborted, and so is [DONE] with no finish_reason
  (vLLM v0.18 skipped the finish chunk for an abort before the first token);
- a normal finish without [DONE] is missing_done, a clean end with neither truncated;
- a broken connection (incomplete chunked body, reset) after headers is reset;
- no data event within the stall timeout is hung; comments do not reset that clock;
  a stream the harness cancels after such a silence is hung, not cancelled;
- a field of the wrong type (a list for finish_reason, a number for choices) makes the
  stream not_sse, or error_event inside an error object, with the field named: no bytes
  a server sends raise out of here, and an event over max_event_bytes ends the stream
  as not_sse ("event over N bytes") without keeping it.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from harness.quantiles import quantile_of_sorted
from harness.streams.record import Outcome, StreamRecord
from harness.streams.sse import MAX_EVENT_BYTES, EventTooLarge, SSEEvent, SSEParser

# vLLM's normal ends, plus the two other ends OpenAI-compatible servers use.
NORMAL_FINISH = frozenset(
    {"stop", "length", "tool_calls", "repetition", "content_filter", "function_call"}
)
BODY_EXCERPT_BYTES = 2048


class End(enum.StrEnum):
    """How the transport ended, as the client saw it."""

    EOF = "eof"  # the body ended cleanly
    RESET = "reset"  # broken after headers: reset, incomplete chunked body
    STALL = "stall"  # the client gave up: no data event within the stall timeout
    CANCELLED = "cancelled"  # the harness ended the request
    CONNECT = "connect"  # no response at all: refused, timeout, closed before headers


@dataclass(frozen=True)
class Thresholds:
    stall_timeout_s: float = 30.0
    ttft_slo_s: float | None = None
    itl_slo_s: float | None = None
    max_event_bytes: int = MAX_EVENT_BYTES


class StreamObserver:
    def __init__(
        self, request_id: str, sent_at: float, thresholds: Thresholds, keep_text: bool = False
    ):
        self.request_id = request_id
        self.pieces: list[str] | None = [] if keep_text else None
        self.sent_at = sent_at
        self.th = thresholds
        self.status: int | None = None
        self.content_type: str | None = None
        self.headers_s: float | None = None
        self._parser = SSEParser(thresholds.max_event_bytes)
        self._body = bytearray()  # kept only for non-SSE responses, capped
        self._is_sse = False
        self.bytes = 0
        self.events = 0
        self.comments = 0
        self.tokens = 0
        self.last_data_s: float | None = None
        self.ttft_s: float | None = None
        self._last_token_s: float | None = None
        self._gaps: list[float] = []
        self._skews: list[float] = []
        self.finish_reason: str | None = None
        self.done = False
        self.error: str | None = None
        self.invalid: str | None = None
        self.usage: dict | None = None
        self.response_id = self.model = self.fingerprint = None
        self.upstream: str | None = None  # the serving pod, when the gateway names it
        self.content_encoding: str | None = None  # set by the client when not identity
        self.overflowed = False  # an event over max_event_bytes: judged, read no further
        self._shape: _TokenShape | None = None  # the usual token chunk's text, learned
        self._learned = 0  # shapes learned (a server whose chunks all differ stops it)

    # --- feeding -------------------------------------------------------------
    def headers(self, status: int, content_type: str | None, t: float) -> None:
        self.status = status
        self.content_type = content_type
        self.headers_s = t
        media = (content_type or "").split(";")[0].strip().lower()
        self._is_sse = media == "text/event-stream" and 200 <= status < 300

    def chunk(self, data: bytes, t: float) -> None:
        self.bytes += len(data)
        if not self._is_sse:
            if len(self._body) < BODY_EXCERPT_BYTES:
                self._body += data[: BODY_EXCERPT_BYTES - len(self._body)]
            return
        if self.overflowed:
            return
        try:
            events = self._parser.feed(data, t)
        except EventTooLarge as exc:
            self._overflow(str(exc))
            return
        for ev in events:
            self._event(ev)

    def _overflow(self, reason: str) -> None:
        self.overflowed = True
        self.invalid = self.invalid or reason
        self._parser = SSEParser(self.th.max_event_bytes)  # drop what it held

    def expected_end(self, max_tokens: int | None) -> float | None:
        """When (epoch seconds) this answer should end at the pace its tokens have come so
        far, if it asked for max_tokens; None before three tokens, or once it has ended."""
        if not max_tokens or self.done or self.finish_reason or self.tokens < 3:
            return None
        if self.ttft_s is None or self._last_token_s is None:
            return None
        per_token = (self._last_token_s - self.ttft_s) / (self.tokens - 1)
        left = max(0, max_tokens - self.tokens)
        return self.sent_at + self._last_token_s + left * per_token

    def since_data_s(self, now: float) -> float:
        """Time without a data event (from the send when there was none yet)."""
        return now - (self.last_data_s if self.last_data_s is not None else 0.0)

    def _event(self, ev: SSEEvent) -> None:
        try:
            self._read_event(ev)
        except Exception as exc:  # a shape the checks below missed: still one record
            self.invalid = self.invalid or f"unreadable event ({type(exc).__name__}: {exc})"[:300]

    def _read_event(self, ev: SSEEvent) -> None:
        if ev.data is None:
            self.comments += 1
            return
        self.events += 1
        self.last_data_s = ev.t
        if self.done:
            return  # nothing after [DONE] changes the answer
        if ev.data.strip() == "[DONE]":
            self.done = True
            return
        if self._shape is not None:
            content = self._shape.content(ev.data)
            if content is not None:  # the usual token chunk again: one token more
                self._token(ev.t)
                if self.pieces is not None:
                    self.pieces.append(content)
                return
        try:
            obj = _loads(ev.data)
        except ValueError:
            self.invalid = self.invalid or f"data is not JSON: {ev.data[:80]!r}"
            return
        if not isinstance(obj, dict):
            self.invalid = self.invalid or f"data is not a JSON object: {ev.data[:80]!r}"
            return
        if "error" in obj or obj.get("object") == "error":
            # vLLM >= 0.10.1 nests {"error": {...}}; older versions sent a flat object.
            err = obj.get("error") if isinstance(obj.get("error"), dict) else obj
            message = err.get("message") if isinstance(err, dict) else None
            self.error = self.error or str(message or err)[:500]
            return
        bad = _wrong_type(obj)
        if bad:
            self.invalid = self.invalid or f"{bad}: {ev.data[:80]!r}"
            return
        if "rollcheck_sent_at" in obj:
            self._skews.append(self.sent_at + ev.t - float(obj["rollcheck_sent_at"]))
        if not (self.response_id and self.model and self.fingerprint):
            self.response_id = self.response_id or obj.get("id")
            self.model = self.model or obj.get("model")
            self.fingerprint = self.fingerprint or obj.get("system_fingerprint")
        if obj.get("usage"):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or []:
            if _has_content(choice):
                self._token(ev.t)
                if self.pieces is not None:
                    self.pieces.append(_content(choice))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if self._learned < MAX_SHAPES and "rollcheck_sent_at" not in obj:
            shape = _TokenShape.learn(ev.data, obj)
            if shape is not None:
                self._shape, self._learned = shape, self._learned + 1

    def _token(self, t: float) -> None:
        self.tokens += 1
        if self.ttft_s is None:
            self.ttft_s = t
        else:
            self._gaps.append(t - self._last_token_s)
        self._last_token_s = t

    # --- judging -------------------------------------------------------------
    def finish(self, end: End, t: float, error: str | None = None) -> StreamRecord:
        if end == End.EOF and self._is_sse and not self.overflowed:
            try:
                for ev in self._parser.close(t):
                    self._event(ev)
            except EventTooLarge as exc:
                self._overflow(str(exc))
        if (
            end == End.CANCELLED
            and not self.done
            and self.since_data_s(t) > self.th.stall_timeout_s
        ):
            # Cut at the end of the run after a silence the client would not have waited
            # out: it was already hung, and `cancelled` (harmless) would hide that.
            end = End.STALL
        outcome = self._classify(end)
        gaps = sorted(self._gaps)
        skews = sorted(self._skews)
        flags = []
        if self.th.ttft_slo_s is not None and self.status and 200 <= self.status < 300:
            waited = self.ttft_s if self.ttft_s is not None else t
            if waited > self.th.ttft_slo_s:
                flags.append("ttft_slo_breach")
        if self.th.itl_slo_s is not None and gaps and gaps[-1] > self.th.itl_slo_s:
            flags.append("itl_slo_breach")
        if self.status is not None and 200 <= self.status < 300 and self.tokens == 0:
            flags.append("empty")
        message = self.error or self.invalid or error
        if outcome in (Outcome.HTTP_ERROR, Outcome.NOT_SSE) and self._body:
            message = message or self._body.decode("utf-8", errors="replace")
        return StreamRecord(
            request_id=self.request_id,
            outcome=outcome.value,
            sent_at=self.sent_at,
            duration_s=t,
            status=self.status,
            content_type=self.content_type,
            content_encoding=self.content_encoding,
            headers_s=self.headers_s,
            ttft_s=self.ttft_s,
            last_event_s=self.last_data_s,
            finish_reason=self.finish_reason,
            done=self.done,
            flags=flags,
            tokens=self.tokens,
            usage=self.usage,
            itl_max_s=gaps[-1] if gaps else None,
            itl_p50_s=quantile_of_sorted(gaps, 0.5),
            itl_p99_s=quantile_of_sorted(gaps, 0.99),
            response_id=self.response_id,
            model=self.model,
            system_fingerprint=self.fingerprint,
            error=message,
            events=self.events,
            comments=self.comments,
            bytes=self.bytes,
            skew_p50_s=quantile_of_sorted(skews, 0.5),
            skew_p99_s=quantile_of_sorted(skews, 0.99),
            pieces=self.pieces,
        )

    def _classify(self, end: End) -> Outcome:
        if self.status is None:
            if end == End.CANCELLED:
                return Outcome.CANCELLED
            return Outcome.HUNG if end == End.STALL else Outcome.CONNECT_ERROR
        if not 200 <= self.status < 300:
            return Outcome.HTTP_ERROR
        if self.error is not None:
            return Outcome.ERROR_EVENT
        if not self._is_sse or self.invalid is not None:
            if end == End.CANCELLED:
                return Outcome.CANCELLED
            return Outcome.NOT_SSE
        if self.finish_reason == "abort":
            return Outcome.ABORTED
        if self.done:
            if self.finish_reason in NORMAL_FINISH:
                return Outcome.COMPLETE
            return Outcome.ABORTED  # no finish_reason (v0.18 early abort) or an unknown one
        if end == End.STALL:
            return Outcome.HUNG
        if end == End.CANCELLED:
            return Outcome.CANCELLED
        if end == End.RESET:
            return Outcome.RESET
        if self.finish_reason in NORMAL_FINISH:
            return Outcome.MISSING_DONE
        if self.events == 0 and self._parser.pending_bytes == 0 and self.comments == 0:
            return Outcome.TRUNCATED if self.bytes == 0 else Outcome.NOT_SSE
        return Outcome.TRUNCATED


_SCAN = json.JSONDecoder().scan_once  # the C scanner json.loads ends in
MAX_SHAPES = 4  # token chunk shapes learned per stream, at most
_CONTENT_KEY = '"content":'


class _TokenShape:
    """The text of a usual token chunk around its content string (one choice, its
    delta's content and nothing that changes the answer's state: no finish_reason, usage,
    error or send stamp). A later event whose text is the same but for another content
    is the same chunk with that content: one token more, read without parsing or
    type-checking it again. Only a content with no quote, backslash or unprintable
    character is read this way (its JSON text is then itself); any other event goes the
    whole way, so no verdict changes."""

    __slots__ = ("prefix", "suffix", "size")

    def __init__(self, prefix: str, suffix: str):
        self.prefix, self.suffix = prefix, suffix
        self.size = len(prefix) + len(suffix)

    def content(self, text: str) -> str | None:
        """The content of `text` if it is this chunk with another content, else None."""
        if len(text) <= self.size or not (
            text.startswith(self.prefix) and text.endswith(self.suffix)
        ):
            return None
        content = text[len(self.prefix) : len(text) - len(self.suffix)]
        if '"' in content or "\\" in content or not content.isprintable():
            return None
        return content

    @classmethod
    def learn(cls, text: str, obj: dict) -> _TokenShape | None:
        """The shape of `text`, parsed as `obj`, when it is a usual token chunk."""
        choices = obj.get("choices")
        if not (isinstance(choices, list) and len(choices) == 1) or obj.get("usage"):
            return None
        (choice,) = choices
        delta = choice.get("delta")
        if choice.get("finish_reason") is not None or choice.get("text") is not None:
            return None
        if not isinstance(delta, dict) or any(
            delta.get(k) for k in ("reasoning", "reasoning_content", "tool_calls")
        ):
            return None
        content = delta.get("content")
        key = text.find(_CONTENT_KEY)
        if not (isinstance(content, str) and content) or key < 0:
            return None
        start = key + len(_CONTENT_KEY)
        while text[start : start + 1] in (" ", "\t"):  # json.dumps writes '": "'
            start += 1
        if text[start : start + 1] != '"':
            return None
        start += 1
        end = start + len(content)
        if text[start:end] != content or text[end : end + 1] != '"':
            return None  # escaped, or the key is not where the content is
        shape = cls(text[:start], text[end:])
        # the same text with another content must read as the same chunk with it
        probe = shape.prefix + "x" + shape.suffix
        try:
            same = _loads(probe)
        except ValueError:
            return None
        expected = dict(obj, choices=[dict(choice, delta=dict(delta, content="x"))])
        return shape if same == expected else None


def _loads(text: str):
    """json.loads without its two layers and two whitespace regexes for the usual chunk
    (about a third of its time): the scanner reads one value from the start; a text it
    does not read whole (whitespace around it, extra data, not JSON) goes to json.loads,
    which reads or refuses it as ever."""
    try:
        obj, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return obj if end == len(text) else json.loads(text)


_TEXT = ((str, type(None)), "text")
_OBJECT = ((dict, type(None)), "an object")
_CHUNK_FIELDS = {"id": _TEXT, "model": _TEXT, "system_fingerprint": _TEXT}
_CHOICE_FIELDS = {"finish_reason": _TEXT, "text": _TEXT, "delta": _OBJECT}
_DELTA_FIELDS = {"content": _TEXT, "reasoning": _TEXT, "reasoning_content": _TEXT, "role": _TEXT}


def _wrong_type(obj: dict) -> str | None:
    """The first field of a chunk whose type no OpenAI-compatible server sends, named.
    Every chunk is asked: the usual one is cleared in one pass without naming anything,
    and only one that fails it is walked field by field for the name."""
    return None if _usual(obj) else _first_wrong_type(obj)


_T = _TEXT[0]


def _usual(obj: dict) -> bool:
    """Every field _first_wrong_type looks at is of a type it allows (a missing one, or
    None, is allowed everywhere it looks)."""
    get = obj.get
    if not (
        isinstance(get("id"), _T)
        and isinstance(get("model"), _T)
        and isinstance(get("system_fingerprint"), _T)
        and isinstance(get("usage"), (dict, type(None)))
    ):
        return False
    if "rollcheck_sent_at" in obj:
        sent = obj["rollcheck_sent_at"]
        if isinstance(sent, bool) or not isinstance(sent, (int, float)):
            return False
    choices = get("choices")
    if choices is None:
        return True
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict):
            return False
        cget = choice.get
        delta = cget("delta")
        if not (isinstance(cget("finish_reason"), _T) and isinstance(cget("text"), _T)):
            return False
        if delta is None:
            continue
        if not isinstance(delta, dict):
            return False
        dget = delta.get
        if not (
            isinstance(dget("content"), _T)
            and isinstance(dget("reasoning"), _T)
            and isinstance(dget("reasoning_content"), _T)
            and isinstance(dget("role"), _T)
        ):
            return False
    return True


def _first_wrong_type(obj: dict) -> str | None:

    def check(d: dict, fields: dict, where: str) -> str | None:
        for key, (types, expected) in fields.items():
            if key in d and not isinstance(d[key], types):
                return f"{where}{key} is {type(d[key]).__name__}, not {expected}"
        return None

    problem = check(obj, _CHUNK_FIELDS, "")
    if problem:
        return problem
    if "rollcheck_sent_at" in obj and (
        isinstance(obj["rollcheck_sent_at"], bool)
        or not isinstance(obj["rollcheck_sent_at"], (int, float))
    ):
        return "rollcheck_sent_at is not a number"
    if obj.get("usage") is not None and not isinstance(obj["usage"], dict):
        return f"usage is {type(obj['usage']).__name__}, not an object"
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        return f"choices is {type(choices).__name__}, not a list"
    for i, choice in enumerate(choices or []):
        if not isinstance(choice, dict):
            return f"choices[{i}] is {type(choice).__name__}, not an object"
        problem = check(choice, _CHOICE_FIELDS, f"choices[{i}].") or (
            check(choice["delta"], _DELTA_FIELDS, f"choices[{i}].delta.")
            if isinstance(choice.get("delta"), dict)
            else None
        )
        if problem:
            return problem
    return None


def _content(choice: dict) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or delta.get("reasoning_content") or "")
    return str(choice.get("text") or "")


def _has_content(choice: dict) -> bool:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(
            delta.get("content")
            or delta.get("reasoning")
            or delta.get("reasoning_content")
            or delta.get("tool_calls")
        )
    return bool(choice.get("text"))


def judge_bytes(
    status: int | None,
    content_type: str | None,
    chunks: list[tuple[float, bytes]],
    end: End,
    end_t: float,
    thresholds: Thresholds = Thresholds(),
    request_id: str = "r",
) -> StreamRecord:
    """Classify a whole exchange given as literal data (for tests and replays)."""
    obs = StreamObserver(request_id, sent_at=0.0, thresholds=thresholds)
    if status is not None:
        obs.headers(status, content_type, chunks[0][0] if chunks else end_t)
    for t, data in chunks:
        obs.chunk(data, t)
    return obs.finish(end, end_t)
