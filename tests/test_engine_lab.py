"""How a stream cut by the engine's stop ended, from the bytes real vLLM 0.32 sent
(benchmarks/bench_engine_sigterm.py, quiet and busy runs on this machine)."""

from __future__ import annotations

import pytest

from harness.engines.lab import SigtermEnding, sigterm_ending

pytestmark = pytest.mark.unit

ROLE = (
    b'data: {"id":"chatcmpl-b3","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
    b'"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
)
TOKEN = (
    b'data: {"id":"chatcmpl-8f","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" ab"},"logprobs":null,"finish_reason":null}]}\n\n'
)
ABORT_CHUNK = (
    b'data: {"id":"chatcmpl-8f","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"abort",'
    b'"stop_reason":null,"token_ids":null}]}\n\n'
)
USAGE = (
    b'data: {"id":"chatcmpl-8f","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":16,"total_tokens":43,"completion_tokens":27},'
    b'"system_fingerprint":"vllm-0.32.0-ae5830ad"}\n\n'
)
CORE_ERROR = (
    b'data: {"error": {"message": "EngineCore encountered an issue. See stack trace (above) '
    b'for the root cause.", "type": "InternalServerError", "param": null, "code": 500}}\n\n'
)
DONE = b"data: [DONE]\n\n"
STOP_CHUNK = ABORT_CHUNK.replace(b'"abort"', b'"length"')


@pytest.mark.parametrize(
    "raw, end, ending",
    [
        (ROLE + TOKEN * 3 + ABORT_CHUNK + USAGE + DONE, "eof", SigtermEnding.ABORT),
        (ROLE + DONE, "eof", SigtermEnding.ABORT),  # queued: aborted before its first token
        (ROLE + TOKEN * 3 + CORE_ERROR + DONE, "eof", SigtermEnding.ERROR_EVENT),
        (CORE_ERROR + DONE, "eof", SigtermEnding.ERROR_EVENT),  # queued: only the error
        (ROLE + TOKEN * 3, "silence", SigtermEnding.HANG),
    ],
    ids=["abort-running", "abort-queued", "error-running", "error-queued", "hang"],
)
def test_the_measured_endings(raw, end, ending):
    assert sigterm_ending(raw, end) == ending


@pytest.mark.parametrize(
    "raw, end",
    [
        (ROLE + TOKEN * 3 + STOP_CHUNK + DONE, "eof"),  # it completed: not a cut stream
        (ROLE + TOKEN * 3 + DONE, "eof"),  # tokens, then [DONE] with no finish
        (ROLE + TOKEN * 3 + ABORT_CHUNK, "eof"),  # abort without [DONE]
        (ROLE + TOKEN * 3, "RemoteProtocolError"),  # a reset
        (b"", "eof"),
    ],
    ids=["complete", "done-without-finish", "abort-without-done", "reset", "empty"],
)
def test_anything_else_is_named_other_with_its_bytes(raw, end):
    ending = sigterm_ending(raw, end)
    assert not isinstance(ending, SigtermEnding) and ending.startswith(f"other ({end}")
