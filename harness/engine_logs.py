"""The engines' own request logs as a witness of which pod served a stream.

vLLM with `--enable-log-requests` (opt-in since 0.10.1) logs one line as it accepts a
request, naming it by the id it answers under, `chatcmpl-<X-Request-Id>`
(entrypoints/serve/utils/request_logger.py in 0.32):

    Received request chatcmpl-<id>: params: SamplingParams(...), lora_request: None.

and, at a client's disconnect, `Request chatcmpl-<id> aborted.` (v1/engine/async_llm.py);
no line at a normal finish. The simulator logs the same Received line. The pod whose log names a
request's id served it: with no gateway log at all, this traces each stream. Pure text
in, ids out; the targets say where each pod's log is."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

RECEIVED = re.compile(r"Received request (?:chatcmpl|cmpl)-(\S+?): params")
CHUNK_BYTES = 64 * 1024  # one read of a log: memory stays bounded whatever a pod printed


def received_ids(lines) -> list[str]:
    """The request ids (X-Request-Id, prefix taken off) of the requests a log received."""
    return [m.group(1) for line in lines if (m := RECEIVED.search(line))]


def served_by(logs: Mapping[str, Path]) -> dict[str, str]:
    """request id -> the pod whose engine log received it (pod -> its log file). An id in
    two pods' logs (a retry, another client reusing ids) names neither."""
    seen: dict[str, set[str]] = {}
    for pod, path in logs.items():
        if not Path(path).exists():
            continue
        for rid in received_ids(log_lines(Path(path))):
            seen.setdefault(rid, set()).add(pod)
    return {rid: next(iter(pods)) for rid, pods in seen.items() if len(pods) == 1}


def log_lines(path: Path):
    """A log's lines, a very long one in pieces of CHUNK_BYTES (what is read of a line is
    near its start: a request id, a route)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        while piece := f.readline(CHUNK_BYTES):
            yield piece
