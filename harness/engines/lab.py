"""Experiments against one engine server: the conformance suite's and the SIGTERM bench's.

`start_engine` runs real vLLM (the CPU build, a locally built model) or `rollcheck sim`
with the same flags, and waits for it by its log (startup.wait_started). `Reader`
streams one request in the background and keeps every byte with its arrival time.
`sigterm_ending` names how a stream cut by SIGTERM ended by reading the bytes itself;
`Reader.judged` asks the stream judge separately, so the two readings check each other.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.client import http_get, tls_context
from harness.engines import startup, vllm
from harness.proc import free_port, kill_group
from harness.streams import End, StreamRecord, Thresholds, judge_bytes

MODEL = "m"
CHAT = "/v1/chat/completions"
# the experiments' context (the slow model's max_position_embeddings is 2048), and an
# answer that outlasts any experiment on any machine: about 60 s here, 34 tokens a second
# on one core. (1000 tokens, 29 s, was not enough: on a busy CI machine vLLM's API server
# took 29 s to hand a second request to the engine while the first streamed, and the
# running answer ended before the other was seen queued, twice.)
MAX_MODEL_LEN = 2048
LONG = 2000
# vLLM's /metrics took up to 5.5 s to answer beside two busy loops (measured)
METRICS_TIMEOUT_S = 30


class SigtermEnding(enum.StrEnum):
    """The endings real vLLM 0.32 gives a stream still open when its engine stops (at
    SIGTERM with --shutdown-timeout 0, or at the drain deadline), as measured by
    benchmarks/bench_engine_sigterm.py; which one comes is a race."""

    ERROR_EVENT = "error_event"  # "EngineCore encountered an issue" + [DONE]
    HANG = "hang"  # no more bytes, the socket left open
    # a final chunk with finish_reason abort + [DONE]; before the first token, the role
    # chunk + [DONE] and no finish chunk
    ABORT = "abort"


@dataclass
class Engine:
    kind: str
    port: int
    proc: subprocess.Popen
    log: Path  # the engine's own output, quoted when an experiment cannot go on
    start_s: float = 0.0
    seen_while_starting: set = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)  # the main process only, as the kubelet does

    def exited_within(self, seconds: float) -> bool:
        try:
            self.proc.wait(seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        kill_group(self.proc, signal.SIGKILL)  # vLLM's engine core is a child
        self.proc.wait(30)


def engine_command(
    kind: str,
    port: int,
    shutdown_timeout_s: float = 0,
    model: tuple[str, int] = ("slow", 0),
    core: int | None = None,
    max_num_seqs: int = 4,
    max_num_queued_reqs: int = 0,
    log_requests: bool = False,
    lora: bool = False,
    pd: PD | None = None,
) -> tuple[list[str], dict]:
    """The command and environment of one engine of the kind, the same flags for both.
    vLLM runs with --enforce-eager: torch.compile changes none of what these tests observe
    (the wire, queueing, admission, errors, metrics, refusals while starting, SIGTERM,
    drain) and costs 25-65 s a start on these CPUs (docs/facts.md)."""
    if kind == "vllm":
        extra = ("--max-num-queued-reqs", str(max_num_queued_reqs)) if max_num_queued_reqs else ()
        extra += ("--enable-log-requests",) if log_requests else ()
        extra += vllm.LORA_FLAGS if lora else ()
        env = dict(os.environ, **vllm.serve_env(core), **(vllm.LORA_ENV if lora else {}))
        served = vllm.model_dir(*model)
        if pd is not None:  # NIXL over UCX's TCP transport, the KV in host memory
            kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}
            extra += ("--kv-transfer-config", json.dumps(kv))
            env |= {
                "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                "VLLM_NIXL_SIDE_CHANNEL_PORT": str(pd.side_port),
                "UCX_TLS": "tcp,self,sm",
            }
            served = pd.serve_as(served)
        cmd = vllm.serve_command(
            "127.0.0.1",
            port,
            served,
            MODEL,
            shutdown_timeout_s=shutdown_timeout_s,
            max_num_seqs=max_num_seqs,
            max_model_len=MAX_MODEL_LEN,
            extra=extra,
            eager=True,
        )
        return cmd, env
    cmd = [sys.executable, "-m", "harness.cli", "sim", "--port", str(port)]
    cmd += ["--model", MODEL, "--max-num-seqs", str(max_num_seqs)]
    cmd += ["--max-model-len", str(MAX_MODEL_LEN)]
    cmd += ["--shutdown-timeout", str(shutdown_timeout_s), "--startup-s", "2"]
    cmd += ["--itl-s", "0.015", "--max-num-queued-reqs", str(max_num_queued_reqs)]
    cmd += ["--enable-log-requests"] if log_requests else []
    cmd += ["--runtime-lora"] if lora else []
    if pd is not None:  # the weights by seed, as vLLM's model_dir builds them
        cmd += ["--model-version", f"seed{model[1]}", "--pd-role", pd.role]
        cmd += ["--pd-prefill-url", pd.prefill_url] if pd.prefill_url else []
    return cmd, dict(os.environ)


@dataclass
class PD:
    """An engine's part in prefill/decode disaggregation (vLLM: the NixlConnector)."""

    role: str  # prefill or decode
    side_port: int  # vLLM: the NIXL side channel's port
    link_dir: Path  # vLLM: the model is served as `<link_dir>/model`, a link to it
    prefill_url: str = ""  # the simulator's decode: where its sidecar prefills

    def serve_as(self, model: Path) -> Path:
        """One model path for every engine whatever its weights: the handshake hashes the
        path, so weights of one shape under one path pass it, as a rollout that keeps the
        model's name does (docs/facts.md)."""
        self.link_dir.mkdir(parents=True, exist_ok=True)
        link = self.link_dir / "model"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(model)
        return Path("model")


def start_engine(
    kind: str, log_dir: Path, gate: startup.StartGate | None = None, **flags
) -> Engine:
    """One engine of the kind (flags: engine_command's), answering /health. With a gate,
    it starts once the gate has a free slot, and holds the slot until it answers."""
    if kind == "vllm":
        vllm.check_memory(1)
    if gate is not None:
        gate.acquire()
    try:
        return _start(kind, Path(log_dir), **flags)
    finally:
        if gate is not None:
            gate.release()


def _start(kind: str, log_dir: Path, **flags) -> Engine:
    port = free_port()
    cmd, env = engine_command(kind, port, **flags)
    log = log_dir / f"{kind}-{port}.log"
    pd = flags.get("pd")
    cwd = pd.link_dir if pd is not None and kind == "vllm" else None  # its model, relative
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=cwd
        )
    engine = Engine(kind, port, proc, log)

    def exited() -> None:
        if proc.poll() is not None:
            tail = "\n".join(startup.log_tail(log, 30))
            raise startup.StartupFailed(
                f"{kind} exited while starting ({proc.returncode}):\n{tail}"
            )

    def healthy() -> bool:
        try:
            status = http_get(engine.url + "/health", timeout=2).status_code
        except httpx.ConnectError:
            status = "refused"
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        engine.seen_while_starting.add(status)
        return status == 200

    try:
        engine.start_s = startup.wait_started(healthy, log, f"{kind} on port {port}", alive=exited)
    except BaseException:
        engine.stop()
        raise
    return engine


def body(max_tokens: int = 5, **kw) -> dict:
    b = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "stream": True}
    return b | {"max_tokens": max_tokens, "ignore_eos": True} | kw


def events(raw: bytes) -> list:
    """The data events of a stream: "[DONE]" or the parsed JSON object."""
    out = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:].decode(errors="replace")
                try:
                    out.append(payload if payload == "[DONE]" else json.loads(payload))
                except ValueError:
                    out.append(payload)
    return out


class Reader(threading.Thread):
    """One streamed request in the background: status, bytes, when they came, how it ended."""

    def __init__(self, url: str, payload: dict, read_timeout_s: float = 30):
        super().__init__(daemon=True)
        self.url, self.payload, self.read_timeout_s = url, payload, read_timeout_s
        self.status = self.headers_at = self.body_at = self.content_type = None
        self.raw, self.end, self.ended_at = b"", None, None
        self.chunks: list[tuple[float, bytes]] = []  # (seconds since sent, bytes)
        self.t0 = time.monotonic()
        self._cancel = threading.Event()
        self.start()

    def run(self) -> None:
        timeout = httpx.Timeout(60, read=self.read_timeout_s)
        try:
            post = dict(json=self.payload, timeout=timeout, verify=tls_context())
            with httpx.stream("POST", self.url + CHAT, **post) as r:
                self.status, self.headers_at = r.status_code, time.monotonic()
                self.content_type = r.headers.get("content-type")
                for chunk in r.iter_raw():
                    self.body_at = self.body_at or time.monotonic()
                    self.raw += chunk
                    self.chunks.append((time.monotonic() - self.t0, chunk))
                    if self._cancel.is_set():
                        self.end = "cancelled"  # the client left; the engine aborts it
                        return
            self.end = "eof"
        except httpx.ReadTimeout:
            self.end = "silence"  # no byte for read_timeout_s: hung
        except httpx.HTTPError as exc:
            self.end = type(exc).__name__
        finally:
            self.ended_at = time.monotonic()

    def cancel(self) -> None:
        """Leave mid-stream, as a client does, so the next request is admitted now
        rather than after a long answer whose length depends on the machine's speed."""
        self._cancel.set()
        self.join(30)

    def wait_tokens(self, n: int, timeout_s: float = 60) -> None:
        """Until n tokens have streamed; fails, saying how this stream stands, if they
        do not come in time (a stream refused or ended early is not a running one)."""
        deadline = time.monotonic() + timeout_s
        while self.raw.count(b'"content"') < n + 1:
            if self.end is not None or time.monotonic() > deadline:
                raise AssertionError(f"{n} tokens did not stream: {self.state()}")
            time.sleep(0.05)

    def judged(self) -> StreamRecord:
        """The stream judge's record of this exchange (after the Reader has ended), with
        the read timeout as its stall timeout."""
        ends = {"eof": End.EOF, "silence": End.STALL, "cancelled": End.CANCELLED}
        end = ends.get(self.end, End.RESET if self.status is not None else End.CONNECT)
        took = (self.ended_at or time.monotonic()) - self.t0
        th = Thresholds(stall_timeout_s=self.read_timeout_s)
        return judge_bytes(self.status, self.content_type, self.chunks, end, took, th)

    def state(self) -> str:
        """Status, timings, bytes and ending, for a failure message."""
        since = lambda t: "-" if t is None else f"{t - self.t0:.2f} s"  # noqa: E731
        tail = self.raw[-160:] if len(self.raw) > 320 else self.raw
        chunks = self.raw.count(b'"content"')
        return (
            f"status {self.status}, headers at {since(self.headers_at)}, first byte at "
            f"{since(self.body_at)}, {len(self.raw)} bytes, {chunks} content chunks, "
            f"ended {self.end!r} at "
            f"{since(self.ended_at)}, last bytes {tail!r}"
        )


def sigterm_ending(raw: bytes, end: str | None) -> SigtermEnding | str:
    """How a stream cut by the engine's stop ended (its bytes, and how the read ended: eof,
    silence for a hang, ...): one of SigtermEnding, or a description
    of something else (which no measured run of vLLM 0.32 has shown). An abort before the
    stream's first token is the role chunk and [DONE] with no finish chunk at all
    (measured: a request still queued at SIGTERM)."""
    evs = events(raw)
    if end == "silence":
        return SigtermEnding.HANG
    if end == "eof" and len(evs) >= 2 and evs[-1] == "[DONE]":
        chunks = [e for e in evs[:-1] if isinstance(e, dict)]
        if chunks and "error" in chunks[-1]:
            return SigtermEnding.ERROR_EVENT
        choices = [c for e in chunks for c in e.get("choices") or []]
        finishes = [c.get("finish_reason") for c in choices if c.get("finish_reason")]
        content = any((c.get("delta") or {}).get("content") for c in choices)
        if finishes == ["abort"] or (not finishes and not content and choices):
            return SigtermEnding.ABORT
    return f"other ({end}, last events {evs[-2:]}, last bytes {raw[-200:]!r})"


def fingerprint(r: Reader) -> str | None:
    """The system_fingerprint a stream carried (vLLM: on the terminal chunk only)."""
    found = [e.get("system_fingerprint") for e in events(r.raw) if isinstance(e, dict)]
    found = [f for f in found if f]
    return found[-1] if found else None


def gauges(engine: Engine, timeout_s: float = METRICS_TIMEOUT_S) -> tuple[float, float]:
    """(running, waiting) by the engine's own metrics."""
    text = http_get(engine.url + "/metrics", timeout=timeout_s).text
    value = lambda name: next(  # noqa: E731
        float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(name + "{")
    )
    return value("vllm:num_requests_running"), value("vllm:num_requests_waiting")


def answers_finished(engine: Engine, timeout_s: float = METRICS_TIMEOUT_S) -> float:
    """How many answers the engine has counted finished (vllm:request_success_total, every
    reason). vLLM counts an answer here in the same step that drops it from the unfinished
    requests its admission limit counts (AsyncLLM's output handler), which can be long
    before its client has read the answer's last byte from a loaded API server."""
    text = http_get(engine.url + "/metrics", timeout=timeout_s).text
    prefix = "vllm:request_success_total{"
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln.startswith(prefix))


def engine_state(engine: Engine) -> str:
    """The engine's running/waiting gauges and its last 15 log lines."""
    try:
        now = "{:g} running, {:g} waiting".format(*gauges(engine))
    except (httpx.HTTPError, StopIteration) as exc:
        now = f"/metrics: {type(exc).__name__}"
    return now + "\nengine log:\n" + "\n".join(startup.log_tail(engine.log))


def wait_queued(engine: Engine, running: Reader, queued: Reader, timeout_s: float = 60) -> str:
    """Until `queued` is held behind `running`: the engine's own metrics count it waiting, or,
    on the wire, it has its headers, no byte for 2 s, while `running` keeps streaming (a
    loaded API server can take seconds to hand a request to the scheduler). Returns which
    evidence was seen; fails with both requests' state and the engine's.
    /metrics is asked with a short timeout, so a slow answer does not hold the loop while
    `queued`'s own silence timeout runs out. (The polls that held it for 5-21 s in CI were
    in httpx's TLS set-up, not on the wire: harness.client.tls_context.)"""
    deadline = time.monotonic() + timeout_s
    at_headers = None  # how much of the running answer had come when `queued` got headers
    problem = f"not seen queued within {timeout_s} s"
    while time.monotonic() < deadline:
        if not running.is_alive():
            problem = "the running request ended before the other was seen queued"
            break
        if queued.end is not None:
            problem = "the queued request ended before it was seen queued"
            break
        if queued.status is not None and at_headers is None:
            at_headers = len(running.raw)
        # on the wire: 2 s of headers and nothing else, while the running answer moved on
        # (it may come in bursts on a busy machine: any progress counts, not a rate)
        silent = queued.headers_at is not None and time.monotonic() - queued.headers_at >= 2
        if queued.status == 200 and queued.raw == b"" and silent:
            if len(running.raw) > at_headers:
                return "wire"
        try:
            if gauges(engine, timeout_s=0.5)[1] >= 1:
                return "metrics"
        except httpx.TimeoutException:
            pass  # a /metrics that did not answer in time says nothing either way
        time.sleep(0.1)
    raise AssertionError(
        f"{engine.kind}: {problem}\n  running: {running.state()}\n  queued: {queued.state()}"
        f"\n  engine: {engine_state(engine)}"
    )


def most_waiting_until_ended(engine: Engine, reader: Reader, timeout_s: float = 120) -> float:
    """The most requests the engine's own gauges counted waiting while `reader` streamed
    (until it ended, or `timeout_s`): whether a request was queued past the engine's limit
    stays on the gauge for as long as the answer ahead of it runs. A /metrics that does not
    answer within 2 s is skipped: it says nothing either way."""
    most, deadline = 0.0, time.monotonic() + timeout_s
    while reader.end is None and time.monotonic() < deadline:
        try:
            most = max(most, gauges(engine, timeout_s=2)[1])
        except httpx.TimeoutException:
            pass
        time.sleep(0.1)
    reader.join(max(0.0, deadline - time.monotonic()))
    return most


def wait_idle(engine: Engine, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while gauges(engine) != (0, 0):
        if time.monotonic() > deadline:
            raise AssertionError(f"{engine.kind} not idle in {timeout_s} s: {engine_state(engine)}")
        time.sleep(0.1)


def one_queued(
    engine: Engine,
    running_tokens: int,
    queued_tokens: int,
    read_timeout_s: float = 30,
    include_usage: bool = False,
    queued_read_timeout_s: float | None = None,
) -> tuple[Reader, Reader]:
    """A running request (n tokens in) and a second one held behind it in the one slot
    (include_usage: the running one asks for the usage chunk; queued_read_timeout_s: the
    queued one's silence timeout, read_timeout_s unless given: it runs from its headers,
    since a queued request gets no byte at all).
    The set-up is tried twice: if the running answer ends before the second request is
    seen queued, or the queued one's silence timeout runs out first (a first try on a slow
    machine), that is a set-up miss, not an engine behaviour; the second miss fails with
    both tries' state."""
    missed = []
    for _ in range(2):
        wait_idle(engine)  # the one slot is free: no earlier answer holds it
        usage = {"stream_options": {"include_usage": True}} if include_usage else {}
        running = Reader(engine.url, body(running_tokens, **usage), read_timeout_s=read_timeout_s)
        running.wait_tokens(3)
        queued_timeout_s = queued_read_timeout_s or read_timeout_s
        queued = Reader(engine.url, body(queued_tokens), read_timeout_s=queued_timeout_s)
        try:
            wait_queued(engine, running, queued)
            return running, queued
        except AssertionError as exc:
            answered = not running.is_alive() and running.raw.endswith(b"data: [DONE]\n\n")
            timed_out = queued.end == "silence" and queued.raw == b"" and running.is_alive()
            if not (answered or timed_out):
                raise  # not a set-up miss: the engine did something else
            missed.append(str(exc))
            queued.cancel()
            running.cancel()
            print(f"set-up missed, trying again: {exc}")
    raise AssertionError("twice: " + "\n".join(missed))
