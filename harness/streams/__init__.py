"""The functional core for streamed answers: SSE parsing, judging, records, summaries."""

from harness.streams.gateway_line import GatewayLine
from harness.streams.judge import End, StreamObserver, Thresholds, judge_bytes
from harness.streams.record import BROKEN, FLAGS, Outcome, StreamRecord, read_jsonl, write_jsonl

__all__ = [
    "BROKEN",
    "FLAGS",
    "End",
    "GatewayLine",
    "Outcome",
    "StreamObserver",
    "StreamRecord",
    "Thresholds",
    "judge_bytes",
    "read_jsonl",
    "write_jsonl",
]
