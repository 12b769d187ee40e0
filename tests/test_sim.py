"""The simulator against the wire format and behaviour in shared/facts.md.

Real HTTP on loopback, real signals to a real subprocess. These tests parse the
bytes themselves: the simulator is never judged by rollcheck's own checker.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from harness.proc import free_port, refuses_connections
from harness.sim.settings import SimSettings

pytestmark = pytest.mark.process

CHAT = "/v1/chat/completions"


def body(stream=True, **kw):
    b = {"model": "rollcheck-sim", "messages": [{"role": "user", "content": "hello"}]}
    b["stream"] = stream
    b.update(kw)
    return b


def events(raw: bytes) -> list:
    """Data payloads of an SSE body, parsed as JSON where they are JSON."""
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line[6:]
                out.append(data if data == "[DONE]" else json.loads(data))
    return out


class StreamReader(threading.Thread):
    """Reads one stream in the background, keeping bytes and how it ended."""

    def __init__(self, url: str, payload: dict, headers=None, timeout_s: float = 30):
        super().__init__(daemon=True)
        self.url, self.payload, self.headers, self.timeout_s = url, payload, headers, timeout_s
        self.raw = b""
        self.status = None
        self.error: str | None = None
        self.first_byte = threading.Event()
        self.headers_at: float | None = None
        self.body_at: float | None = None  # the first body byte
        self.start()

    def run(self):
        try:
            with httpx.stream(
                "POST",
                self.url + CHAT,
                json=self.payload,
                headers=self.headers,
                timeout=httpx.Timeout(self.timeout_s),
            ) as r:
                self.status = r.status_code
                self.headers_at = time.monotonic()
                for chunk in r.iter_raw():
                    self.body_at = self.body_at or time.monotonic()
                    self.raw += chunk
                    if b"content" in self.raw and b'"content":""' not in chunk:
                        self.first_byte.set()
        except httpx.HTTPError as exc:
            self.error = type(exc).__name__
        finally:
            self.first_byte.set()

    def finishes(self):
        return [
            e["choices"][0]["finish_reason"]
            for e in events(self.raw)
            if isinstance(e, dict) and e.get("choices") and e["choices"][0]["finish_reason"]
        ]


def test_chat_stream_wire_format(sim_factory):
    sim = sim_factory(enable_request_id_headers=True, model_version="v7")
    payload = body(max_tokens=5, stream_options={"include_usage": True})
    r = httpx.post(sim.url + CHAT, json=payload, headers={"X-Request-Id": "req-1"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-request-id"] == "req-1"
    evs = events(r.content)
    role, *content, final, usage, done = evs
    assert role["object"] == "chat.completion.chunk"
    assert role["id"] == "chatcmpl-req-1"
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["choices"][0]["finish_reason"] is None
    assert len(content) == 5 and all(c["choices"][0]["delta"]["content"] for c in content)
    assert final["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert done == "[DONE]"
    # vLLM 0.32: the fingerprint is on the last JSON chunk only
    assert usage["system_fingerprint"] == "fp_v7"
    assert all("system_fingerprint" not in e for e in [role, *content, final])
    # no `event:` or `id:` lines, only data lines
    assert all(line.startswith("data: ") for line in r.text.splitlines() if line)


def test_without_usage_the_last_token_rides_on_the_finish_chunk(sim_factory):
    sim = sim_factory(model_version="v7")
    role, *content, final, done = events(
        httpx.post(sim.url + CHAT, json=body(max_tokens=5)).content
    )
    assert len(content) == 4 and all(c["choices"][0]["finish_reason"] is None for c in content)
    assert (
        final["choices"][0]["delta"]["content"] and final["choices"][0]["finish_reason"] == "length"
    )
    assert final["system_fingerprint"] == "fp_v7" and done == "[DONE]"


def test_request_id_header_not_echoed_by_default(sim_factory):
    sim = sim_factory()
    r = httpx.post(sim.url + CHAT, json=body(max_tokens=1), headers={"X-Request-Id": "abc"})
    assert "x-request-id" not in r.headers
    assert events(r.content)[0]["id"] == "chatcmpl-abc"


def test_completions_stream_has_no_role_chunk(sim_factory):
    sim = sim_factory()
    r = httpx.post(
        sim.url + "/v1/completions", json={"prompt": "hi", "stream": True, "max_tokens": 3}
    )
    evs = events(r.content)
    assert evs[-1] == "[DONE]"
    assert all(e["object"] == "text_completion" for e in evs[:-1])
    assert "delta" not in evs[0]["choices"][0] and evs[0]["choices"][0]["text"]
    assert evs[-2]["choices"][0]["finish_reason"] == "length"


def test_non_streaming_and_determinism(sim_factory):
    sim = sim_factory()
    other = sim_factory(model_version="v2")
    bad = sim_factory(degraded=True)

    def text(s, **kw):
        r = httpx.post(s.url + CHAT, json=body(stream=False, **kw))
        assert r.status_code == 200
        return r.json()["choices"][0]["message"]["content"]

    assert text(sim, seed=1) == text(sim, seed=1)
    assert text(sim, seed=1) != text(sim, seed=2)
    assert text(sim, seed=1) != text(other, seed=1)
    assert text(sim, seed=1) != text(bad, seed=1)
    r = httpx.post(sim.url + CHAT, json=body(stream=False, max_tokens=2, ignore_eos=True))
    assert r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 2


def test_natural_stop(sim_factory):
    sim = sim_factory(min_answer_tokens=3, max_answer_tokens=3)
    evs = events(httpx.post(sim.url + CHAT, json=body()).content)
    assert evs[-2]["choices"][0]["finish_reason"] == "stop"
    assert len(evs) == 1 + 3 + 1  # role, three tokens (the last with the finish), [DONE]


def test_models_version_metrics(sim_factory):
    sim = sim_factory()
    assert httpx.get(sim.url + "/v1/models").json()["data"][0]["id"] == "rollcheck-sim"
    assert httpx.get(sim.url + "/ping").status_code == 200
    assert "version" in httpx.get(sim.url + "/version").json()
    httpx.post(sim.url + CHAT, json=body(max_tokens=2))
    metrics = httpx.get(sim.url + "/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:generation_tokens_total",
    ):
        assert name in metrics
    assert 'vllm:request_success_total{engine="0",finished_reason="length"' in metrics
    tokens = [ln for ln in metrics.splitlines() if ln.startswith("vllm:generation_tokens_total{")]
    assert tokens and float(tokens[0].split()[-1]) == 2.0


@pytest.mark.parametrize("chat", [True, False])
def test_content_chunks_match_the_general_encoder(chat):
    # Content chunks are built from pre-encoded parts; they must stay byte-identical
    # to encoding the whole chunk, whatever the token or request id holds.
    from harness.sim.app import Request, SimApp
    from harness.sim.settings import SimSettings

    app = SimApp(SimSettings(model='m"odel'))
    req = Request('id"\\x', chat, True, "p", 5, False, 0, 0, False, None)
    encode = app._content_chunk_encoder(req, 1700000000)
    for token in (" word", 'quote"d', "back\\slash", "\u00e9t\u00e9 \u2603", "\n\t", ""):
        assert encode(token) == app._chunk(req, 1700000000, app._choice(req, token, None))


def test_slow_reader_gets_every_token_in_order(sim_factory):
    # A client that stops reading fills the socket buffers until the server waits for
    # them to drain; the stream must then carry on where it stopped, losing nothing.
    sim = sim_factory(ttft_s=0.0, itl_s=0.0)
    n = 40_000  # about 7 MB: more than the kernel's largest send buffer (4 MB)
    payload = json.dumps(body(max_tokens=n, ignore_eos=True)).encode()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.connect(("127.0.0.1", sim.settings.port))
        s.sendall(
            b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: "
            + str(len(payload)).encode()
            + b"\r\n\r\n"
            + payload
        )
        time.sleep(2.0)  # nothing is read yet
        parts = []
        s.settimeout(30)
        while chunk := s.recv(1 << 20):
            parts.append(chunk)
    assert httpx.get(sim.url + "/sim/stats").json()["blocked_sends"] > 0
    raw = b"".join(parts)
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    pieces, at = [], 0
    while True:  # undo chunked transfer encoding
        eol = chunked.index(b"\r\n", at)
        size = int(chunked[at:eol], 16)
        if size == 0:
            break
        pieces.append(chunked[eol + 2 : eol + 2 + size])
        at = eol + 2 + size + 2
    data = b"".join(pieces)
    evs = events(data)
    content = [e for e in evs[1:-1] if isinstance(e, dict)]
    assert len(content) == n and all(e["choices"][0]["delta"]["content"] for e in content)
    reference = events(httpx.post(sim.url + CHAT, json=body(max_tokens=n, ignore_eos=True)).content)
    assert [e["choices"][0]["delta"] for e in evs[1:-1]] == [
        e["choices"][0]["delta"] for e in reference[1:-1]
    ]
    assert evs[-2]["choices"][0]["finish_reason"] == "length" and evs[-1] == "[DONE]"


def test_queueing_under_max_num_seqs(sim_factory):
    sim = sim_factory(max_num_seqs=1, ttft_s=0.05, itl_s=0.05)
    first = StreamReader(sim.url, body(max_tokens=20, ignore_eos=True))
    first.first_byte.wait(5)
    t0 = time.monotonic()
    second = StreamReader(sim.url, body(max_tokens=1))
    time.sleep(0.3)
    metrics = httpx.get(sim.url + "/metrics").text
    assert 'vllm:num_requests_waiting{engine="0",model_name="rollcheck-sim"} 1.0' in metrics
    # vLLM 0.32: a queued request has its 200 and headers, and then not one byte
    assert second.status == 200 and second.raw == b""
    second.join(10)
    first.join(10)
    # the second request waited for the first one's slot (~1 s of decode)
    assert time.monotonic() - t0 > 0.6
    assert second.body_at - second.headers_at > 0.5  # the role chunk came with its token
    assert second.finishes() == ["length"] and first.finishes() == ["length"]


def test_admission_limit_and_max_model_len(sim_factory):
    # vLLM 0.32 (measured, one slot): --max-num-queued-reqs 2 holds one waiting request
    sim = sim_factory(max_num_seqs=1, max_num_queued_reqs=2, itl_s=0.05, max_model_len=1024)
    running = StreamReader(sim.url, body(max_tokens=40, ignore_eos=True))
    running.first_byte.wait(5)
    queued = StreamReader(sim.url, body(max_tokens=1))
    time.sleep(0.3)
    r = httpx.post(sim.url + CHAT, json=body(max_tokens=1))
    assert r.status_code == 503 and "currently busy" in r.json()["error"]["message"]
    r = httpx.post(sim.url + CHAT, json=body(max_tokens=5000))
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "max_tokens"
    assert "cannot be greater than max_model_len=1024" in err["message"]
    queued.join(10)
    assert queued.finishes() == ["length"]


@pytest.mark.parametrize("mode", ["abort", "legacy"])
def test_sigterm_abort_and_legacy_modes(sim_factory, mode):
    sim = sim_factory(shutdown_mode=mode, itl_s=0.05)
    reader = StreamReader(sim.url, body(max_tokens=200, ignore_eos=True))
    reader.first_byte.wait(5)
    sim.signal(signal.SIGTERM)
    reader.join(5)
    assert sim.exited_within(5)
    evs = events(reader.raw)
    if mode == "abort":
        assert reader.finishes() == ["abort"] and evs[-1] == "[DONE]"
    else:
        assert reader.finishes() == [] and "[DONE]" not in evs
    assert reader.error is None  # the body ended cleanly in both modes


def test_sigterm_hang_mode_keeps_connection_until_the_client_leaves(sim_factory):
    """vLLM 0.32, default --shutdown-timeout 0, one of its three endings (measured): no more
    bytes, the listener closed at once, the socket held open; SIGKILL ends it, or the
    process exits once its clients give up."""
    sim = sim_factory(shutdown_mode="hang", itl_s=0.05)
    reader = StreamReader(sim.url, body(max_tokens=200, ignore_eos=True))
    reader.first_byte.wait(5)
    sim.signal(signal.SIGTERM)
    time.sleep(0.3)
    assert refuses_connections(sim.settings.port)
    size = len(reader.raw)
    time.sleep(1.0)
    assert len(reader.raw) == size and reader.is_alive()
    assert not sim.exited_within(0.1)
    sim.signal(signal.SIGKILL)
    reader.join(5)
    assert reader.error == "RemoteProtocolError"  # incomplete chunked body
    assert reader.finishes() == []


def test_a_hung_engine_exits_once_its_clients_leave(sim_factory):
    sim = sim_factory(shutdown_mode="hang", itl_s=0.05)
    reader = StreamReader(sim.url, body(max_tokens=200, ignore_eos=True), timeout_s=1.0)
    reader.first_byte.wait(5)
    sim.signal(signal.SIGTERM)
    reader.join(5)
    assert reader.error == "ReadTimeout"  # the client gave up on the silence
    assert sim.exited_within(5)


def sigterm_one_running_one_queued(sim_factory, mode: str):
    """One slot: a long answer streaming (with include_usage) and a request queued behind
    it when SIGTERM comes with --shutdown-timeout 0. Returns the sim, both readers, and
    when the SIGTERM was sent."""
    sim = sim_factory(shutdown_mode=mode, itl_s=0.05, max_num_seqs=1)
    payload = body(max_tokens=200, ignore_eos=True, stream_options={"include_usage": True})
    running = StreamReader(sim.url, payload)
    running.first_byte.wait(5)
    queued = StreamReader(sim.url, body(max_tokens=5))
    time.sleep(0.2)
    t0 = time.monotonic()
    sim.signal(signal.SIGTERM)
    running.join(5)
    queued.join(5)
    return sim, running, queued, t0


def test_sigterm_error_event_mode(sim_factory):
    """vLLM 0.32's error ending (measured): the EngineCore error event and [DONE], no finish
    and no usage chunk even with include_usage; a queued request gets only the error
    event; the listener closes at once and the process exits about 0.5 s later."""
    sim, reader, queued, t0 = sigterm_one_running_one_queued(sim_factory, "error_event")
    evs = events(reader.raw)
    assert evs[-2]["error"]["message"].startswith("EngineCore encountered an issue")
    assert evs[-2]["error"]["code"] == 500 and evs[-1] == "[DONE]"
    assert reader.finishes() == [] and all("usage" not in e for e in evs[:-1])
    q = events(queued.raw)
    assert len(q) == 2 and "error" in q[0] and q[1] == "[DONE]"  # no role chunk
    assert refuses_connections(sim.settings.port)
    assert sim.exited_within(3) and time.monotonic() - t0 >= 0.3


def test_sigterm_abort_mode_as_vllm_0_32_sends_it(sim_factory):
    """vLLM 0.32's abort ending (measured): the running stream gets a final chunk with
    finish_reason abort, its usage chunk and [DONE]; a request still queued gets only the
    role chunk and [DONE]; the listener closes at once, the process exits soon after."""
    sim, reader, queued, _ = sigterm_one_running_one_queued(sim_factory, "abort")
    evs = events(reader.raw)
    assert reader.finishes() == ["abort"] and "usage" in evs[-2] and evs[-1] == "[DONE]"
    q = events(queued.raw)
    assert len(q) == 2 and q[0]["choices"][0]["delta"]["role"] == "assistant"
    assert queued.finishes() == [] and q[1] == "[DONE]"
    assert refuses_connections(sim.settings.port)
    assert sim.exited_within(3)


def test_race_mode_draws_every_measured_ending_by_its_weight():
    """Over many pods the race gives each of vLLM 0.32's three endings about as often as
    the SIGTERM benchmark measured it; one pod always the same (seeded)."""
    from collections import Counter

    from harness.sim.app import DEADLINE_WEIGHTS, RACE_WEIGHTS, race_ending

    assert SimSettings().shutdown_mode == "race"  # the default: what vLLM 0.32 does
    draws = Counter(race_ending(0, port) for port in range(8000, 10000))
    assert set(draws) == {"error_event", "hang", "abort"}
    total = sum(RACE_WEIGHTS.values())
    for ending, weight in RACE_WEIGHTS.items():
        assert abs(draws[ending] / 2000 - weight / total) < 0.05, (ending, draws)
    assert {race_ending(7, 8123) for _ in range(5)} == {race_ending(7, 8123)}
    # at a drain's deadline the engine is killed, never asked to abort (measured 6 of 6)
    deadline = {race_ending(0, port, DEADLINE_WEIGHTS) for port in range(8000, 8200)}
    assert deadline == {"error_event", "hang"}


@pytest.mark.parametrize("ending", ["error_event", "hang", "abort"])
def test_race_mode_ends_a_stream_as_its_draw_says(sim_factory, ending):
    """A pod whose draw is each ending (its seed chosen for its port) ends the stream
    that way, with the listener closed at once."""
    from harness.sim.app import race_ending

    port = free_port()
    seed = next(s for s in range(1000) if race_ending(s, port) == ending)
    sim = sim_factory(itl_s=0.05, seed=seed, port=port)
    reader = StreamReader(sim.url, body(max_tokens=200, ignore_eos=True), timeout_s=2.0)
    reader.first_byte.wait(5)
    sim.signal(signal.SIGTERM)
    time.sleep(0.3)
    assert refuses_connections(port)
    reader.join(10)
    evs = events(reader.raw)
    if ending == "error_event":
        assert evs[-2]["error"]["message"].startswith("EngineCore encountered an issue")
        assert evs[-1] == "[DONE]" and reader.finishes() == []
    elif ending == "abort":
        assert reader.finishes() == ["abort"] and evs[-1] == "[DONE]"
    else:
        assert reader.error == "ReadTimeout" and reader.finishes() == []  # no more bytes


def test_drain_finishes_in_flight_and_aborts_new(sim_factory):
    sim = sim_factory(shutdown_timeout_s=5, itl_s=0.02, shutdown_teardown_s=0.5)
    in_flight = StreamReader(sim.url, body(max_tokens=50, ignore_eos=True))  # ~1 s
    in_flight.first_byte.wait(5)
    t0 = time.monotonic()
    sim.signal(signal.SIGTERM)
    time.sleep(0.2)
    assert httpx.get(sim.url + "/health").status_code == 200  # vLLM keeps /health up
    new = httpx.post(sim.url + CHAT, json=body(max_tokens=5))
    # vLLM 0.32 refuses new work during its drain, and closes the connection
    assert new.status_code == 500 and new.headers["connection"] == "close"
    assert new.json()["error"]["message"] == "cannot schedule new futures after shutdown"
    in_flight.join(10)
    assert in_flight.finishes() == ["length"]
    drained = time.monotonic()
    assert not sim.exited_within(0.3)  # the teardown after the last stream
    assert sim.exited_within(5)
    assert time.monotonic() - drained >= 0.5  # shutdown_teardown_s
    assert time.monotonic() - t0 < 4  # exits when drained, not at the timeout


@pytest.mark.parametrize("mode", ["error_event", "hang"])
def test_a_finished_drain_tears_down_past_its_deadline(sim_factory, mode):
    # the deadline ends only streams still open: a drain that finished is in its teardown
    sim = sim_factory(shutdown_timeout_s=0.5, shutdown_teardown_s=2.0, shutdown_mode=mode)
    sim.signal(signal.SIGTERM)
    assert not sim.exited_within(1.5)
    assert sim.exited_within(3)


def test_drain_timeout_aborts_the_rest(sim_factory):
    sim = sim_factory(shutdown_timeout_s=1, itl_s=0.05, shutdown_mode="abort")
    long = StreamReader(sim.url, body(max_tokens=400, ignore_eos=True))  # ~20 s
    long.first_byte.wait(5)
    t0 = time.monotonic()
    sim.signal(signal.SIGTERM)
    long.join(10)
    elapsed = time.monotonic() - t0
    assert long.finishes() == ["abort"]
    assert 0.9 < elapsed < 5
    assert sim.exited_within(5)


def test_drain_options_503(sim_factory):
    sim = sim_factory(shutdown_timeout_s=5, drain_new_requests="503", drain_health=503)
    in_flight = StreamReader(sim.url, body(max_tokens=100, ignore_eos=True))
    in_flight.first_byte.wait(5)
    sim.signal(signal.SIGTERM)
    time.sleep(0.2)
    assert httpx.get(sim.url + "/health").status_code == 503
    assert httpx.post(sim.url + CHAT, json=body()).status_code == 503


def test_fault_http_error(sim_factory):
    sim = sim_factory()
    r = httpx.post(sim.url + CHAT, json=body(), headers={"X-Rollcheck-Fault": "http_error=429"})
    assert r.status_code == 429 and r.json()["error"]["code"] == 429


def test_fault_error_event_then_done(sim_factory):
    sim = sim_factory()
    r = httpx.post(
        sim.url + CHAT, json=body(max_tokens=20), headers={"X-Rollcheck-Fault": "error_event=2"}
    )
    evs = events(r.content)
    assert r.status_code == 200
    assert set(evs[-2]["error"]) == {"message", "type", "param", "code"}
    assert evs[-1] == "[DONE]"
    assert sum(1 for e in evs if isinstance(e, dict) and e.get("choices")) == 1 + 2


def test_fault_stall(sim_factory):
    sim = sim_factory(itl_s=0.01)
    with pytest.raises(httpx.ReadTimeout):
        with httpx.stream(
            "POST",
            sim.url + CHAT,
            json=body(max_tokens=50),
            headers={"X-Rollcheck-Fault": "stall=3"},
            timeout=1.0,
        ) as r:
            for _ in r.iter_raw():
                pass


def test_fault_crash_breaks_the_stream_and_exits(sim_factory):
    sim = sim_factory(itl_s=0.01)
    reader = StreamReader(sim.url, body(max_tokens=50), {"X-Rollcheck-Fault": "crash=3"})
    reader.join(5)
    assert reader.error == "RemoteProtocolError"
    assert sim.exited_within(5) and sim.proc.returncode == 3


def test_fault_rates_per_process(sim_factory):
    sim = sim_factory(fault_http_error_rate=1.0, fault_http_status=500)
    assert httpx.post(sim.url + CHAT, json=body()).status_code == 500


def test_startup_refuses_connections(sim_factory):
    sim = sim_factory(wait=False, startup_s=1.5)
    time.sleep(0.8)
    with socket.socket() as s:
        assert s.connect_ex((sim.settings.host, sim.settings.port)) != 0
    time.sleep(1.5)
    assert httpx.get(sim.url + "/health").status_code == 200


def test_startup_health_503_option(sim_factory):
    sim = sim_factory(wait=False, startup_s=1.5, startup_health_503=True)
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        try:
            assert httpx.get(sim.url + "/health").status_code == 503
            break
        except httpx.ConnectError:
            time.sleep(0.05)
    assert httpx.post(sim.url + CHAT, json=body()).status_code == 503
    time.sleep(1.5)
    assert httpx.get(sim.url + "/health").status_code == 200


@pytest.mark.parametrize(
    "payload, status",
    [
        (b"{not json", 400),
        (json.dumps({"model": "rollcheck-sim"}).encode(), 400),
        (json.dumps(body(model="gpt-unknown")).encode(), 404),
        (json.dumps(body(max_tokens=-3)).encode(), 400),
        (b"[1, 2]", 400),
    ],
)
def test_bad_input_gets_vllm_errors(sim_factory, payload, status):
    sim = sim_factory()
    r = httpx.post(sim.url + CHAT, content=payload)
    assert r.status_code == status
    assert r.json()["error"]["code"] == status and r.json()["error"]["message"]


def test_with_enable_log_requests_the_simulator_logs_each_request_as_vllm_does(tmp_path):
    """vLLM 0.32's line for an accepted request, under the id the engine answers with
    (chatcmpl-<X-Request-Id>): the witness that traces a stream with no gateway log."""
    import subprocess

    from harness.engine_logs import received_ids
    from harness.proc import sim_command, stop_group, wait_http

    settings = SimSettings(port=free_port(), enable_log_requests=True)
    log = tmp_path / "sim.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            sim_command(settings), start_new_session=True, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        url = f"http://127.0.0.1:{settings.port}"
        wait_http(url + "/health", proc=proc)
        body = {"model": "rollcheck-sim", "messages": [{"role": "user", "content": "hi"}]}
        for rid in ("log-1", "log-2"):
            r = httpx.post(url + "/v1/chat/completions", json=body, headers={"X-Request-Id": rid})
            assert r.json()["id"] == f"chatcmpl-{rid}"
    finally:
        stop_group(proc, signal.SIGKILL)
    lines = log.read_text().splitlines()
    assert received_ids(lines) == ["log-1", "log-2"], lines
    assert any("Received request chatcmpl-log-1: params: SamplingParams(" in x for x in lines)


def test_lora_adapters_load_answer_and_unload_as_vllm_does(sim_factory):
    """Runtime LoRA adapters as vLLM 0.32 serves them: an adapter loaded by name answers
    requests naming it with its own weights (its chunks name it as their model), is listed
    in /v1/models, is refused a second load without load_inplace, and after its unload a
    request naming it gets the 404 "does not exist" answer; a stream in flight on it at the
    unload goes on to its end (the engine keeps the adapter)."""
    sim = sim_factory(runtime_lora=True, itl_s=0.02)

    def lora(path, **kw):
        return httpx.post(f"{sim.url}/v1/{path}_lora_adapter", json=kw)

    def answer(model, seed=1):
        r = httpx.post(sim.url + CHAT, json=body(stream=False, model=model, seed=seed))
        return r.status_code, r.json()

    r = lora("load", lora_name="support-v1", lora_path="/adapters/support/1")
    assert (r.status_code, r.text) == (
        200,
        "Success: LoRA adapter 'support-v1' added successfully.",
    )
    base, v1 = answer("rollcheck-sim"), answer("support-v1")
    assert v1[0] == 200 and v1[1]["model"] == "support-v1"
    assert v1[1]["choices"][0]["message"] != base[1]["choices"][0]["message"]
    ids = [m["id"] for m in httpx.get(sim.url + "/v1/models").json()["data"]]
    assert ids == ["rollcheck-sim", "support-v1"]
    again = lora("load", lora_name="support-v1", lora_path="/adapters/support/1")
    assert (
        again.status_code == 400 and "has already been loaded" in again.json()["error"]["message"]
    )
    assert lora("load", lora_name="x").status_code == 400  # a path is required
    assert lora("load", lora_name="rollcheck-sim", lora_path="/p").status_code == 400

    reader = StreamReader(sim.url, body(model="support-v1", max_tokens=50, ignore_eos=True))
    reader.first_byte.wait(5)
    assert lora("unload", lora_name="support-v1").status_code == 200
    reader.join(10)
    chunks = events(reader.raw)
    assert chunks[-1] == "[DONE]" and chunks[-2]["choices"][0]["finish_reason"] == "length"
    status, gone = answer("support-v1")
    assert status == 404 and gone["error"]["message"].startswith("The model `support-v1` does")
    assert lora("unload", lora_name="support-v1").status_code == 404


def test_an_adapter_reloaded_in_place_answers_with_its_new_weights_unless_the_engine_keeps_them(
    sim_factory,
):
    """A reload in place (load_inplace, the same name, a new path) keeps the adapter's id:
    vLLM replaces the weights; an engine that caches adapters by id (stale_lora_reload)
    goes on answering with the old ones, the failure versioned names avoid."""
    fresh, stale = (
        sim_factory(runtime_lora=True),
        sim_factory(runtime_lora=True, stale_lora_reload=True),
    )

    def text(sim, model="support"):
        r = httpx.post(sim.url + CHAT, json=body(stream=False, model=model, seed=3))
        return r.json()["choices"][0]["message"]["content"]

    for sim in (fresh, stale):
        httpx.post(
            sim.url + "/v1/load_lora_adapter", json={"lora_name": "support", "lora_path": "/a/1"}
        )
    old = text(fresh)
    assert text(stale) == old  # the same weights answer the same
    for sim in (fresh, stale):
        r = httpx.post(
            sim.url + "/v1/load_lora_adapter",
            json={"lora_name": "support", "lora_path": "/a/2", "load_inplace": True},
        )
        assert r.status_code == 200
    assert text(fresh) != old and text(stale) == old
    # a new name is a new adapter, whatever the engine caches
    httpx.post(
        stale.url + "/v1/load_lora_adapter", json={"lora_name": "support-2", "lora_path": "/a/2"}
    )
    assert text(stale, "support-2") == text(fresh)


def test_without_runtime_lora_the_adapter_endpoints_do_not_exist(sim_factory):
    sim = sim_factory()
    r = httpx.post(sim.url + "/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "/a"})
    assert r.status_code == 404
    assert httpx.post(sim.url + CHAT, json=body(stream=False, model="a")).status_code == 404
