"""The rule table: literal bytes -> outcome and flags (pure, no I/O)."""

from __future__ import annotations

import json

import pytest

from harness.streams import End, Outcome, StreamRecord, Thresholds, judge_bytes
from harness.streams.sse import SSEParser
from tests.streamcases import CASES, DONE, ROLE, STOP, Case, chunk, data

pytestmark = pytest.mark.unit

ENDS = {"eof": End.EOF, "reset": End.RESET, "stall": End.STALL}


def judge(case: Case, pieces: list[bytes], th=Thresholds()) -> StreamRecord:
    chunks = [(0.01 * (i + 1), p) for i, p in enumerate(pieces)]
    return judge_bytes(case.status, case.content_type, chunks, ENDS[case.end], 1.0, th)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rule_table_whole_body(case):
    record = judge(case, [case.body])
    assert record.outcome == case.outcome
    assert record.flags == case.flags
    if case.tokens is not None:
        assert record.tokens == case.tokens


@pytest.mark.parametrize("case", [c for c in CASES if len(c.body) < 10_000], ids=lambda c: c.name)
def test_rule_table_one_byte_packets(case):
    record = judge(case, [case.body[i : i + 1] for i in range(len(case.body))])
    assert record.outcome == case.outcome
    assert record.flags == case.flags


def test_every_outcome_is_covered_by_the_table():
    covered = {c.outcome for c in CASES} | {"connect_error", "cancelled"}
    assert covered == {o.value for o in Outcome}


def test_ttft_counts_content_not_the_role_chunk():
    body = [
        (0.10, ROLE),
        (0.50, data(chunk("a"))),
        (0.60, data(chunk("b"))),
        (1.00, data(chunk("c"))),
        (1.1, STOP + DONE),
    ]
    r = judge_bytes(200, "text/event-stream", body, End.EOF, 1.2, Thresholds(30, 0.3, 0.3))
    assert r.ttft_s == 0.50
    assert r.itl_max_s == pytest.approx(0.40)
    assert r.flags == ["ttft_slo_breach", "itl_slo_breach"]
    r = judge_bytes(200, "text/event-stream", body, End.EOF, 1.2, Thresholds(30, 0.6, 0.5))
    assert r.flags == [] and r.outcome == "complete"


def test_reasoning_and_tool_calls_count_as_content():
    reasoning = data(
        {"choices": [{"index": 0, "delta": {"reasoning": "hmm"}, "finish_reason": None}]}
    )
    tool = data(
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "t"}]}, "finish_reason": None}]}
    )
    r = judge_bytes(
        200, "text/event-stream", [(0.2, ROLE + reasoning), (0.3, tool + STOP + DONE)], End.EOF, 0.4
    )
    assert r.tokens == 2 and r.ttft_s == 0.2


def test_no_token_within_slo_is_a_breach_even_without_content():
    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE)], End.STALL, 5.0, Thresholds(1, 2.0))
    assert r.outcome == "hung" and "ttft_slo_breach" in r.flags


def test_cancelled_and_connect_error():
    assert judge_bytes(None, None, [], End.CONNECT, 0.1).outcome == "connect_error"
    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE)], End.CANCELLED, 0.5)
    assert r.outcome == "cancelled"
    assert judge_bytes(None, None, [], End.CANCELLED, 0.1).outcome == "cancelled"


def test_cancelled_after_a_silence_longer_than_the_stall_timeout_is_hung():
    th = Thresholds(stall_timeout_s=2.0)
    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE)], End.CANCELLED, 5.0, th)
    assert r.outcome == "hung"  # the harness cut a stream that was already dead
    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE)], End.CANCELLED, 1.5, th)
    assert r.outcome == "cancelled"  # a live stream, cut at the end of the run
    r = judge_bytes(200, "text/event-stream", [], End.CANCELLED, 5.0, th)
    assert r.outcome == "hung"  # headers and then nothing at all


def test_record_jsonl_round_trip(tmp_path):
    from harness.streams import read_jsonl, write_jsonl

    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE + STOP + DONE)], End.EOF, 0.2)
    write_jsonl([r, r], tmp_path / "records.jsonl")
    back = list(read_jsonl(tmp_path / "records.jsonl"))
    assert back == [r, r]
    assert back[0].outcome is Outcome.COMPLETE  # read back as the enum, not a string


def test_a_record_with_an_outcome_rollcheck_never_writes_is_one_clear_error(tmp_path):
    """A hand-edited run folder: an outcome rollcheck does not know is not judged as if it
    were one (a typo of "complete" would count as broken or not by accident)."""
    from harness.files import BadInput
    from harness.streams import read_jsonl, write_jsonl

    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE + STOP + DONE)], End.EOF, 0.2)
    path = tmp_path / "records.jsonl"
    write_jsonl([r], path)
    path.write_text(path.read_text().replace('"complete"', '"compleet"'))
    with pytest.raises(BadInput) as err:
        list(read_jsonl(path))
    assert f"{path}:1: not a stream record (field outcome is 'compleet', not one of" in str(
        err.value
    )


def test_a_records_gateway_line_is_read_back_as_one(tmp_path):
    """The gateway line joined to a record is written with it and read back as the same
    GatewayLine (what traces the stream to its pod); a hand-edited one of the wrong type
    is one clear error naming the field, not a report that reads a text as a status."""
    from harness.files import BadInput
    from harness.streams import GatewayLine, read_jsonl, write_jsonl

    r = judge_bytes(200, "text/event-stream", [(0.1, ROLE + STOP + DONE)], End.EOF, 0.2)
    r.gateway = GatewayLine("r1", 200, "10.0.0.7:8000", "200", 10, 0.2, 1000.0, tried=["a"])
    path = tmp_path / "records.jsonl"
    write_jsonl([r], path)
    (back,) = read_jsonl(path)
    assert back.gateway == r.gateway and back.gateway.upstream_addr == "10.0.0.7:8000"
    path.write_text(path.read_text().replace('"status":200,"upstream', '"status":"200","upstream'))
    with pytest.raises(BadInput) as err:
        list(read_jsonl(path))
    assert "not a stream record (field gateway: status is str '200')" in str(err.value)


def test_parser_keeps_crlf_split_across_packets():
    p = SSEParser()
    events = p.feed(b"data: a\r", 0.1) + p.feed(b"\n\r", 0.2) + p.feed(b"\ndata: b\n\n", 0.3)
    assert [e.data for e in events] == ["a", "b"]


def test_parser_large_line_is_linear():
    import time

    p = SSEParser(max_event_bytes=10_000_000)
    payload = b"data: " + b"x" * 5_000_000 + b"\n\n"
    t0 = time.perf_counter()
    events = []
    for i in range(0, len(payload), 4096):
        events += p.feed(payload[i : i + 4096], 0.0)
    assert len(events) == 1 and len(events[0].data) == 5_000_000
    # a quadratic rescan of the buffer would take minutes here
    assert time.perf_counter() - t0 < 30


def test_a_streams_expected_end_carries_its_own_pace_on():
    """What a drain's choice of victim reads: at 0.1 s a token after the first, a stream
    asking for 10 tokens that has 3 at 0.3 s should end at 1.0 s; nothing is told before
    three tokens, without max_tokens, or once the answer has finished."""
    from harness.streams import StreamObserver

    obs = StreamObserver("r", sent_at=1000.0, thresholds=Thresholds())
    obs.headers(200, "text/event-stream", 0.01)
    obs.chunk(ROLE, 0.05)
    for i, t in enumerate((0.1, 0.2)):
        obs.chunk(data(chunk(f"t{i}")), t)
    assert obs.expected_end(10) is None  # two tokens: too early to tell a pace
    obs.chunk(data(chunk("t2")), 0.3)
    assert obs.expected_end(10) == pytest.approx(1001.0)
    assert obs.expected_end(None) is None
    assert obs.expected_end(2) == pytest.approx(1000.3)  # past its length: ends now
    obs.chunk(STOP + DONE, 0.4)
    assert obs.expected_end(10) is None


def test_a_content_key_before_the_deltas_is_not_taken_for_it():
    """The token chunk shortcut finds the content by its key: an earlier field with a
    "content" of the same text must not be read as the delta's (the shape is checked by
    reading its text back with another content)."""
    from harness.streams import StreamObserver

    def event(note: str, content: str) -> bytes:
        obj = {"meta": {"content": note}, "choices": [{"index": 0, "delta": {"content": content}}]}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    obs = StreamObserver("r", 0.0, Thresholds(30), keep_text=True)
    obs.headers(200, "text/event-stream", 0.0)
    for i, piece in enumerate([event("a", "a"), event("b", "a"), event("c", "a")]):
        obs.chunk(piece, 0.1 * (i + 1))
    obs.chunk(b"data: [DONE]\n\n", 0.5)
    assert obs.pieces == ["a", "a", "a"] and obs.tokens == 3
