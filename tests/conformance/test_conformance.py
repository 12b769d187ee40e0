"""The simulator held to real vLLM: the same experiments against both, the same assertions.

Each experiment runs against `vllm` (the CPU build, scripts/build-vllm, a locally built
random-weight Llama) and `sim` (rollcheck sim with the same flags). Where vLLM races
(at SIGTERM: an error event, a hang or abort + [DONE]) the assertion accepts exactly the
measured set of endings (benchmarks/bench_engine_sigterm.py). One real engine runs at a
time (about 4.5 GB each). Measured facts: docs/facts.md.
"""

from __future__ import annotations

import json
import re
import signal
import time

import httpx
import pytest

from harness.engines.lab import (
    CHAT,
    LONG,
    MAX_MODEL_LEN,
    Reader,
    SigtermEnding,
    answers_finished,
    body,
    events,
    fingerprint,
    most_waiting_until_ended,
    one_queued,
    sigterm_ending,
    start_engine,
)
from harness.proc import refuses_connections
from harness.streams import BROKEN, Outcome

pytestmark = pytest.mark.engine


def running_engine(request, tmp_path_factory, **flags):
    """One engine of the fixture's kind for a module's experiments, stopped after."""
    e = start_engine(request.param, tmp_path_factory.mktemp("engines"), **flags)
    yield e
    e.stop()


@pytest.fixture(scope="module", params=["vllm", "sim"])
def one_slot(request, tmp_path_factory):
    """One sequence slot, one queue place (--max-num-queued-reqs 2 holds one waiting
    request beside a running one, as measured), vLLM's default --shutdown-timeout 0;
    --enable-log-requests (it only adds log lines)."""
    yield from running_engine(
        request, tmp_path_factory, max_num_seqs=1, max_num_queued_reqs=2, log_requests=True
    )


# --- the experiments -----------------------------------------------------------------------


def test_startup_refuses_connections_then_answers_200(one_slot):
    # no 503 phase: the port is not served until the engine is built
    assert one_slot.seen_while_starting <= {"refused", 200}
    assert "refused" in one_slot.seen_while_starting


def test_the_request_log_and_the_response_id_name_the_x_request_id(one_slot):
    """What a stream with no gateway log is traced by: the engine answers under
    chatcmpl-<X-Request-Id>, and with --enable-log-requests logs `Received request
    chatcmpl-<X-Request-Id>: params: ...` as it accepts it (vLLM 0.32: request_logger.py)."""
    from harness.engine_logs import received_ids

    rid = f"conformance-log-{one_slot.kind}"
    r = httpx.post(
        one_slot.url + "/v1/chat/completions",
        json=body(max_tokens=4, stream=False),
        headers={"X-Request-Id": rid},
        timeout=120,
    )
    assert r.status_code == 200 and r.json()["id"] == f"chatcmpl-{rid}", r.text[:300]
    lines = one_slot.log.read_text(errors="replace").splitlines()
    assert rid in received_ids(lines), [x for x in lines if "request" in x.lower()][-5:]
    line = next(x for x in lines if f"chatcmpl-{rid}" in x)
    assert f"Received request chatcmpl-{rid}: params: SamplingParams(" in line, line


def test_wire_format(one_slot):
    r = httpx.post(one_slot.url + CHAT, json=body(5), headers={"X-Request-Id": "rc-1"}, timeout=60)
    role, *content, final, done = events(r.content)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert role["id"] == "chatcmpl-rc-1"  # an incoming X-Request-Id is honoured
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(content) == 4  # five tokens: the last rides on the finish chunk
    assert (
        final["choices"][0]["finish_reason"] == "length"
        and "content" in final["choices"][0]["delta"]
    )
    assert "system_fingerprint" in final  # on the terminal chunk only
    assert all("system_fingerprint" not in e for e in [role, *content])
    assert done == "[DONE]"
    assert all(line.startswith(b"data: ") for line in r.content.splitlines() if line)


def test_usage_chunk(one_slot):
    payload = body(3, stream_options={"include_usage": True})
    *_, usage, done = events(httpx.post(one_slot.url + CHAT, json=payload, timeout=60).content)
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert done == "[DONE]"


def test_max_tokens_above_the_model_length_and_unknown_model(one_slot):
    r = httpx.post(one_slot.url + CHAT, json=body(5000), timeout=30)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "max_tokens" and err["code"] == 400
    assert f"cannot be greater than max_model_len={MAX_MODEL_LEN}" in err["message"]
    # the context the load's preflight reads, before sending answers that cannot fit
    (card,) = httpx.get(one_slot.url + "/v1/models", timeout=30).json()["data"]
    assert card["max_model_len"] == MAX_MODEL_LEN
    r = httpx.post(one_slot.url + CHAT, json=body(5, model="nope"), timeout=30)
    err = r.json()["error"]
    assert r.status_code == 404 and err["type"] == "NotFoundError" and err["param"] == "model"


def test_metric_names_and_labels(one_slot):
    text = httpx.get(one_slot.url + "/metrics", timeout=10).text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:request_success_total",
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
    ):
        lines = [ln for ln in text.splitlines() if ln.startswith(name + "{")]
        assert lines, f"{name} missing"
        assert 'model_name="m"' in lines[0] and "engine=" in lines[0], lines[0]
    assert 'finished_reason="length"' in text
    # the histograms' buckets alike (what harness.histograms reads from either engine)
    from harness.sim.app import ITL_BUCKETS, TTFT_BUCKETS

    for name, bounds in (
        ("vllm:time_to_first_token_seconds_bucket", TTFT_BUCKETS),
        ("vllm:inter_token_latency_seconds_bucket", ITL_BUCKETS),
    ):
        les = set(re.findall(name + r'\{[^}]*le="([^"]+)"', text))
        assert les == {repr(b) for b in bounds} | {"+Inf"}, (name, sorted(les))


def test_a_queued_request_gets_headers_then_nothing_until_admitted(one_slot):
    running, queued = one_queued(one_slot, LONG, 3)
    deadline = time.monotonic() + 5
    while queued.status is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert queued.status == 200  # headers at once
    time.sleep(1)
    assert queued.raw == b"" and running.is_alive()  # and not one byte while it waits
    running.cancel()
    queued.join(60)
    assert queued.body_at - queued.headers_at > 0.5  # the role chunk came with its token
    assert events(queued.raw)[-1] == "[DONE]"


def test_admission_limit_answers_503(one_slot):
    """With the one slot running and the one queue place taken, a third request is refused.
    vLLM decides at its API server, counting the unfinished requests (running and waiting),
    and an answer stops counting when the engine has finished it, not when its client has
    read it. On a busy CI machine that server took 30 s to take the third request up while
    the engine finished the running answer (2000 tokens) long before its client saw the end;
    the third was then admitted and served: a set-up miss, tried again.
    What proves the limit broken: the engine's gauges counting two waiting, or the engine
    not yet counting the running answer finished after the third had its headers (it was
    admitted beside two unfinished requests). Anything else is a miss, tried three times."""
    tries = []
    for _ in range(3):
        finished_before = answers_finished(one_slot)  # idle: the last try's answers ended
        running, queued = one_queued(one_slot, LONG, 3)
        third = Reader(one_slot.url, body(3), read_timeout_s=90)
        deadline = time.monotonic() + 120
        while third.status is None and third.end is None and time.monotonic() < deadline:
            time.sleep(0.05)
        try:  # asked after the third's admission, so it counts what that admission counted
            running_unfinished = third.status == 200 and answers_finished(one_slot) == (
                finished_before
            )
        except httpx.TimeoutException:
            running_unfinished = False  # unread: says nothing either way
        most_waiting = most_waiting_until_ended(one_slot, third)
        running.cancel()
        queued.join(60)
        if third.status == 503:
            assert "currently busy" in json.loads(third.raw)["error"]["message"], third.state()
            return
        evs = events(third.raw)
        refused = evs[-2:-1] and isinstance(evs[-2], dict) and "error" in evs[-2]
        if third.status == 200 and refused:  # the other shape, when requests arrive together
            assert evs[-2]["error"]["code"] == 503 and evs[-1] == "[DONE]", third.state()
            return
        state = (
            f"third: {third.state()}\n  running: {running.state()}, most waiting "
            f"{most_waiting:g}, running answer unfinished at the third's headers: "
            f"{running_unfinished}"
        )
        assert most_waiting < 2 and not running_unfinished, (
            f"{one_slot.kind} queued past its limit:\n  {state}"
        )
        tries.append(state)
        print(f"set-up missed, trying again: {state}")
    raise AssertionError("three set-up misses:\n" + "\n".join(tries))


# what the stream judge must call each ending: never complete
JUDGED = {
    SigtermEnding.ERROR_EVENT: Outcome.ERROR_EVENT,
    SigtermEnding.HANG: Outcome.HUNG,
    SigtermEnding.ABORT: Outcome.ABORTED,
}


# measured (benchmarks/bench_engine_sigterm.py): at a drain's deadline the engine core is
# killed, never asked to abort, and 6 of 6 ended in the error event or a hang
AT_THE_DEADLINE = (SigtermEnding.ERROR_EVENT, SigtermEnding.HANG)


def cut_by_the_stop(r: Reader, name: str, measured=tuple(SigtermEnding)) -> SigtermEnding:
    """A stream in flight when the engine stopped ended in one of the `measured` endings
    (benchmarks/bench_engine_sigterm.py), and the stream judge calls it broken, as that
    ending; anything else fails with the stream's bytes."""
    ending = sigterm_ending(r.raw, r.end)
    assert ending in measured, (
        f"{name}: an ending outside the measured set {[str(m) for m in measured]}: "
        f"{ending}\n  {r.state()}"
    )
    outcome = r.judged().outcome
    assert outcome in BROKEN and outcome == JUDGED[ending], (
        f"{name} ended {ending} and the judge called it {outcome}: {r.state()}"
    )
    evs = events(r.raw)
    if ending == SigtermEnding.ERROR_EVENT:
        err = evs[-2]["error"]
        assert err["message"].startswith("EngineCore encountered an issue") and err["code"] == 500
        # no finish chunk and no usage chunk, even with include_usage
        assert b'"finish_reason":"' not in r.raw and b'"usage"' not in r.raw, r.state()
    return ending


def test_sigterm_with_the_default_shutdown_timeout(one_slot, record_property):
    """Last: it ends the engine. Every stream in flight (one running, one queued) ends in
    one of vLLM 0.32's measured endings, a race: the EngineCore error event + [DONE], a
    hang, or finish_reason abort + [DONE]; none completes; the listener closes at once."""
    # a queued request gets no byte while it waits, and its silence timeout runs from its
    # headers, and SIGTERM comes a few seconds after them: 10 s leaves about 5 s after it
    running, queued = one_queued(
        one_slot, LONG, 5, read_timeout_s=5, include_usage=True, queued_read_timeout_s=10
    )
    one_slot.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert refuses_connections(one_slot.port)  # new connections and /health are refused
    running.join(30)
    queued.join(30)
    seen = {
        "running": str(cut_by_the_stop(running, "running")),
        "queued": str(cut_by_the_stop(queued, "queued")),
    }
    if seen["queued"] == SigtermEnding.ERROR_EVENT:
        assert len(events(queued.raw)) == 2  # no role chunk: only the error and [DONE]
    record_property("sigterm_endings", seen)  # which draw of the race this run saw
    print(f"{one_slot.kind}: SIGTERM endings {seen}, fingerprint {fingerprint(running)}")
    assert one_slot.exited_within(30)  # at once, or once the hung streams' clients left


@pytest.fixture(scope="module", params=["vllm", "sim"])
def draining(request, tmp_path_factory):
    """--shutdown-timeout 30: a drain that covers the answers."""
    yield from running_engine(request, tmp_path_factory, shutdown_timeout_s=30)


def test_drain_finishes_in_flight_refuses_new_and_tears_down(draining):
    streams = [Reader(draining.url, body(250)) for _ in range(2)]
    for s in streams:
        s.wait_tokens(3)
    draining.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert httpx.get(draining.url + "/health", timeout=5).status_code == 200
    r = httpx.post(draining.url + CHAT, json=body(3), timeout=30)
    assert r.status_code == 500
    assert r.json()["error"]["message"] == "cannot schedule new futures after shutdown"
    for s in streams:
        s.join(60)
        evs = events(s.raw)
        assert s.end == "eof" and evs[-1] == "[DONE]"
        assert evs[-2]["choices"][0]["finish_reason"] == "length"  # finished normally
    last = time.monotonic()
    assert not draining.exited_within(2.0)  # teardown after the last stream (~5.5 s)
    assert draining.exited_within(25)
    print(f"{draining.kind}: exit {time.monotonic() - last:.1f} s after the last stream")


@pytest.fixture(scope="module", params=["vllm", "sim"])
def short_drain(request, tmp_path_factory):
    """--shutdown-timeout 3: a drain shorter than the answers in flight."""
    yield from running_engine(request, tmp_path_factory, shutdown_timeout_s=3)


def test_streams_still_open_at_the_drain_deadline(short_drain):
    """Past the deadline the engine core is killed: each stream still open hangs or gets
    the EngineCore error event (never abort: the engine is not asked to), none completes."""
    streams = [Reader(short_drain.url, body(900), read_timeout_s=6) for _ in range(2)]
    for s in streams:
        s.wait_tokens(3)
    short_drain.signal(signal.SIGTERM)
    time.sleep(1.0)
    assert not refuses_connections(short_drain.port)  # still accepting while it drains
    for i, s in enumerate(streams):
        s.join(60)
        cut_by_the_stop(s, f"stream {i + 1}", AT_THE_DEADLINE)
    # (whether the listener closes at the deadline is not asserted: real vLLM still
    # accepted connections after it in one of two runs here)
    assert short_drain.exited_within(30)
