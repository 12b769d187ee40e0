"""Whatever bytes a server sends, the judge gives one record with one outcome and never
raises, and it holds a bounded amount of memory (Hypothesis: arbitrary and mutated vLLM
streams, split at arbitrary points)."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.streams import End, Outcome, StreamObserver, Thresholds, judge_bytes
from tests.properties import bounded
from tests.streamcases import DONE, ROLE, STOP, TOKENS, USAGE, data

pytestmark = pytest.mark.unit

FAST = bounded(100)
OUTCOMES = {o.value for o in Outcome}
SMALL = Thresholds(stall_timeout_s=30, ttft_slo_s=1, itl_slo_s=1, max_event_bytes=4096)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ends = st.sampled_from([End.EOF, End.RESET, End.STALL, End.CANCELLED])


def split(body: bytes, cuts: list[int]) -> list[tuple[float, bytes]]:
    points = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    return [
        (0.01 * i, body[a:b])
        for i, (a, b) in enumerate(zip(points, points[1:], strict=False))
        if b > a
    ]


def one_record(status, content_type, pieces, end, th=SMALL):
    record = judge_bytes(status, content_type, pieces, end, 5.0, th)
    assert record.outcome in OUTCOMES
    json.loads(record.to_json())  # it can be written
    return record


@FAST
@given(
    body=st.binary(max_size=3000),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    status=st.sampled_from([200, 200, 200, 206, 404, 500, 503]),
    content_type=st.sampled_from(["text/event-stream", "text/event-stream; charset=utf-8", None]),
    end=ends,
)
def test_any_bytes_give_one_record(body, cuts, status, content_type, end):
    one_record(status, content_type, split(body, cuts), end)


def vllm_stream() -> list[dict]:
    body = ROLE + TOKENS + STOP + USAGE
    return [json.loads(line[len(b"data: ") :]) for line in body.split(b"\n\n") if line]


@FAST
@given(
    which=st.integers(0, 10),
    path=st.lists(
        st.sampled_from(
            [
                "choices",
                0,
                "delta",
                "content",
                "finish_reason",
                "usage",
                "id",
                "model",
                "error",
                "message",
            ]
        ),
        min_size=1,
        max_size=4,
    ),
    value=json_values,
    cuts=st.lists(st.integers(0, 4000), max_size=12),
    end=ends,
)
def test_a_vllm_stream_with_any_field_mutated_gives_one_record(which, path, value, cuts, end):
    events = vllm_stream()
    event = events[which % len(events)]
    node = event
    for key in path[:-1]:  # walk as far as the path exists, then put the value there
        nxt = node[key] if isinstance(node, dict) and key in node else None
        if isinstance(node, list) and isinstance(key, int) and node:
            nxt = node[0]
        if not isinstance(nxt, (dict, list)):
            break
        node = nxt
    if isinstance(node, dict):
        node[str(path[-1])] = value
    elif node:
        node[0] = value
    body = b"".join(data(e) for e in events) + DONE
    record = one_record(200, "text/event-stream", split(body, cuts), end)
    if record.outcome == Outcome.NOT_SSE and end == End.EOF and record.error:
        assert len(record.error) < 1000


@FAST
@given(
    size=st.integers(4097, 60_000),
    piece=st.integers(256, 70_000),
    newline=st.booleans(),
)
def test_an_event_over_the_limit_is_judged_and_dropped(size, piece, newline):
    body = ROLE + b"data: " + b"y" * size + (b"\n\n" + STOP + DONE if newline else b"")
    obs = StreamObserver("r", 0.0, SMALL)
    obs.headers(200, "text/event-stream", 0.0)
    for i in range(0, len(body), piece):
        obs.chunk(body[i : i + piece], 0.1)
        assert obs._parser.pending_bytes <= SMALL.max_event_bytes + piece
    record = obs.finish(End.EOF, 1.0)
    assert record.outcome == Outcome.NOT_SSE
    assert record.error.startswith("event over 4096 bytes")


def test_a_50_mb_event_holds_little_memory():
    """The issue's case: one 50 MB event took 288 MB for one stream. Now the judge keeps at
    most its 1 MiB limit plus one read's worth of bytes."""
    obs = StreamObserver("r", 0.0, Thresholds(stall_timeout_s=30))
    obs.headers(200, "text/event-stream", 0.0)
    piece = b"z" * 65536
    tracemalloc.start()
    try:
        obs.chunk(ROLE + b"data: ", 0.0)
        for _ in range(50 * 16):
            obs.chunk(piece, 0.1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    record = obs.finish(End.EOF, 1.0)
    assert record.outcome == "not_sse" and record.bytes > 50_000_000
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes"


# a chunk's fields, each of a type a server sends or one it does not
# (mostly of a right type: the walk names only the first wrong field, so a chunk with
# one wrong field among right ones is the case that tells the two apart)
_right = st.one_of(st.none(), st.text(max_size=3))
_wrong = st.one_of(st.integers(), st.booleans(), json_values)


def _mostly(right, wrong):
    return st.integers(0, 9).flatmap(lambda i: wrong if i == 0 else right)


_field = _mostly(_right, _wrong)


def _some_of(*keys: str, value=_field):
    return st.fixed_dictionaries({}, optional={k: value for k in keys})


_delta = _some_of("content", "reasoning", "reasoning_content", "role", "tool_calls")
_choice_object = st.fixed_dictionaries(
    {},
    optional={"finish_reason": _field, "text": _field, "delta": st.one_of(_delta, _delta, _field)},
)
_choice = st.one_of(_choice_object, _choice_object, _choice_object, _field)
_chunk = st.fixed_dictionaries(
    {},
    optional={
        "id": _field,
        "model": _field,
        "system_fingerprint": _field,
        "usage": _mostly(st.one_of(st.none(), st.just({"completion_tokens": 3})), _field),
        "rollcheck_sent_at": _mostly(st.one_of(st.floats(), st.integers()), _field),
        "choices": st.one_of(st.lists(_choice, min_size=1, max_size=3), _field),
    },
)


@bounded(2000)
@given(_chunk)
def test_the_usual_chunk_shortcut_clears_exactly_what_the_field_walk_clears(obj):
    """Every event's types are cleared in one pass (_usual); only a chunk that fails it
    is walked for the field to name. The pass must clear exactly the chunks the walk
    finds nothing wrong with."""
    from harness.streams.judge import _first_wrong_type, _usual

    assert _usual(obj) == (_first_wrong_type(obj) is None), obj


_token_choice = st.fixed_dictionaries(
    {"delta": _some_of("role", "reasoning", "tool_calls")},
    optional={"index": st.integers(), "finish_reason": _field, "text": _field, "logprobs": _field},
)
_token_chunk = st.fixed_dictionaries(
    {"choices": st.lists(_token_choice, min_size=1, max_size=2)},
    optional={"id": _field, "model": _field, "created": st.integers(), "usage": _field},
)
_other = st.one_of(
    _chunk, st.just({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
)


@bounded(500)
@given(
    template=_token_chunk,
    contents=st.lists(
        st.one_of(st.text(max_size=6), st.sampled_from(['"', "\\", "\n", "\u2028"])), max_size=12
    ),
    others=st.lists(st.tuples(st.integers(0, 12), _other), max_size=3),
    compact=st.booleans(),
    cuts=st.lists(st.integers(0, 4000), max_size=8),
)
def test_the_token_chunk_shortcut_reads_exactly_what_parsing_each_chunk_reads(
    template, contents, others, compact, cuts
):
    """A token chunk whose text is the last one's but for its content is read as that
    chunk with that content, without parsing it: every stream gives the same record and
    the same text as parsing every chunk (the shortcut off), whatever the contents
    (quotes, backslashes, line separators) and whatever other chunks come between."""

    def text(obj):
        return json.dumps(obj, separators=(",", ":")) if compact else json.dumps(obj)

    events = []
    for content in contents:
        first, *rest = template["choices"]
        choice = dict(first, delta=dict(first["delta"], content=content))
        chunk = dict(template, choices=[choice, *rest])
        events.append(text(chunk))
    for at, other in others:
        events.insert(at, text(other))
    body = b"".join(b"data: " + e.encode() + b"\n\n" for e in events) + DONE
    pieces = split(body, cuts)

    def read(shortcut: bool):
        obs = StreamObserver("r", 0.0, SMALL, keep_text=True)
        if not shortcut:
            obs._learned = 10**9  # no shape learned: every chunk parsed
        obs.headers(200, "text/event-stream", 0.0)
        for t, piece in pieces:
            obs.chunk(piece, t)
        return obs.finish(End.EOF, 5.0).to_json(), obs.pieces

    assert read(True) == read(False)
