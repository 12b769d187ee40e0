"""Literal event streams, one per judging rule and per nasty case.

Shared by the pure rule-table test and the raw-socket test, so the real client
over loopback must reach the same verdict as the functional core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

SSE = "text/event-stream"


def chunk(content=None, finish=None, role=False, **extra) -> dict:
    delta = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    obj = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    obj["choices"] = [choice]
    obj.update(extra)
    return obj


def data(obj, sep=b"\n\n") -> bytes:
    payload = obj if isinstance(obj, str) else json.dumps(obj)
    return b"data: " + payload.encode() + sep


ROLE = data(chunk(role=True))
TOKENS = data(chunk("Hello")) + data(chunk(" world"))
STOP = data(chunk(finish="stop"))
USAGE = data({"id": "chatcmpl-x", "choices": [], "usage": {"completion_tokens": 2}})
DONE = b"data: [DONE]\n\n"
ERROR = data(
    {"error": {"message": "boom", "type": "InternalServerError", "param": None, "code": 500}}
)


@dataclass
class Case:
    name: str
    body: bytes
    outcome: str
    status: int = 200
    content_type: str = SSE
    end: str = "eof"  # eof | reset (close mid-chunk) | stall (stop sending)
    flags: list[str] = field(default_factory=list)
    tokens: int | None = None


CASES = [
    Case("complete", ROLE + TOKENS + STOP + USAGE + DONE, "complete", tokens=2),
    Case("complete_crlf", (ROLE + TOKENS + STOP + DONE).replace(b"\n", b"\r\n"), "complete"),
    Case("complete_cr_only", (ROLE + TOKENS + STOP + DONE).replace(b"\n", b"\r"), "complete"),
    Case(
        "data_without_space", (ROLE + TOKENS + STOP + DONE).replace(b"data: ", b"data:"), "complete"
    ),
    Case("final_event_without_blank_line", ROLE + TOKENS + STOP + b"data: [DONE]", "complete"),
    Case(
        "multi_line_data",
        ROLE
        + b'data: {"id":"x","choices":[{"index":0,\ndata: "delta":{"content":"hi"}}]}\n\n'
        + STOP
        + DONE,
        "complete",
        tokens=1,
    ),
    Case(
        "keep_alive_comments_are_not_tokens",
        b": keep-alive\n\n" + ROLE + b": keep-alive\n\n" + STOP + DONE,
        "complete",
        flags=["empty"],
        tokens=0,
    ),
    Case(
        "content_type_with_parameters",
        ROLE + TOKENS + STOP + DONE,
        "complete",
        content_type="text/event-stream; charset=utf-8",
    ),
    Case("missing_done", ROLE + TOKENS + STOP, "missing_done"),
    Case("truncated", ROLE + TOKENS, "truncated"),
    Case("empty_200_stream", b"", "truncated", flags=["empty"]),
    Case("aborted", ROLE + TOKENS + data(chunk(finish="abort")) + DONE, "aborted"),
    Case("v018_abort_before_first_token", ROLE + DONE, "aborted", flags=["empty"]),
    Case("error_event_then_done", ROLE + TOKENS + ERROR + DONE, "error_event"),
    Case(
        "flat_pre_0_10_1_error",
        ROLE + data({"object": "error", "message": "old"}) + DONE,
        "error_event",
        flags=["empty"],
    ),
    Case("reset_mid_stream", ROLE + TOKENS, "reset", end="reset"),
    Case(
        "reset_after_done_is_still_complete", ROLE + TOKENS + STOP + DONE, "complete", end="reset"
    ),
    Case("stall", ROLE + data(chunk("a")), "hung", end="stall"),
    Case(
        "http_error_json",
        b'{"error": {"message": "busy"}}',
        "http_error",
        status=503,
        content_type="application/json",
    ),
    Case(
        "json_body_instead_of_stream",
        b'{"choices": []}',
        "not_sse",
        content_type="application/json",
        flags=["empty"],
    ),
    Case("invalid_json_data", ROLE + b"data: {oops\n\n" + STOP + DONE, "not_sse", flags=["empty"]),
    Case("binary_garbage", bytes(range(256)) * 4, "not_sse", flags=["empty"]),
    Case(
        "never_a_blank_line",
        b"data: " + json.dumps(chunk("a")).encode() + b"\ndata: [DONE]\n",
        "not_sse",
        flags=["empty"],
    ),
    Case("big_data_line", ROLE + data(chunk("x" * 900_000)) + STOP + DONE, "complete", tokens=1),
    # over the 1 MiB event limit: judged and dropped, never buffered without bound
    Case(
        "event_over_the_limit",
        ROLE + data(chunk("x" * 3_000_000)) + STOP + DONE,
        "not_sse",
        flags=["empty"],
    ),
    Case("line_without_an_end", ROLE + b"data: " + b"x" * 3_000_000, "not_sse", flags=["empty"]),
    # wrong types anywhere in a chunk: one record, the field named, never an exception
    Case("finish_reason_a_list", ROLE + TOKENS + data(chunk(finish=["stop"])) + DONE, "not_sse"),
    Case(
        "choices_a_number",
        ROLE + data({"id": "x", "choices": 5}) + STOP + DONE,
        "not_sse",
        flags=["empty"],
    ),
    Case("content_a_number", ROLE + data(chunk(7)) + STOP + DONE, "not_sse", flags=["empty"]),
    Case(
        "error_message_a_list",
        ROLE + data({"error": {"message": ["boom"], "code": 500}}) + DONE,
        "error_event",
        flags=["empty"],
    ),
]
