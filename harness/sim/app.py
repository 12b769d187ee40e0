"""The vLLM-compatible engine: a raw ASGI app with a sequence-slot scheduler.

Behaviour follows vLLM's OpenAI server (see shared facts): the role chunk,
content chunks, a finish chunk, an optional usage chunk and `data: [DONE]`;
errors mid-stream as `{"error": {...}}` followed by [DONE]; a SIGTERM drain
that keeps accepting connections and keeps /health at 200.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import resource
import sys
import time
import uuid
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from harness.quantiles import quantile_of_sorted
from harness.sim import text
from harness.sim.adapters import AdapterError, Adapters
from harness.sim.pd import KV_PATH, PD, PrefillFailed, mixed_weights
from harness.sim.settings import FAULT_KINDS, SimSettings

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]

FAULT_HEADER = "x-rollcheck-fault"

# A text no request can put into a chunk (HTTP headers cannot carry NUL), and its JSON.
_MARK = "\x00rollcheck-token\x00"
_MARK_JSON = json.dumps(_MARK).encode()
_ENCODED: dict[str, bytes] = {}


def _json_str(s: str) -> bytes:
    """json.dumps(s) as bytes, cached: answers reuse a small vocabulary."""
    out = _ENCODED.get(s)
    if out is None:
        if len(_ENCODED) > 65536:
            _ENCODED.clear()
        out = _ENCODED[s] = json.dumps(s).encode()
    return out


class BadRequest(Exception):
    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.err_type, self.param = status, message, err_type, param


def error_obj(status: int, message: str, err_type: str, param: str | None = None) -> dict:
    # vLLM >= 0.10.1 error shape.
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> bytes:
    return json.dumps(error_obj(status, message, err_type, param)).encode()


# What vLLM 0.32 sends (measured): the in-stream error when its engine core is killed
# at SIGTERM, the answer to a new request during a drain, and its admission refusal.
ENGINE_CORE_ERROR = error_obj(
    500,
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "InternalServerError",
)
SHUTDOWN_500 = error_body(500, "cannot schedule new futures after shutdown", "InternalServerError")
BUSY_503 = error_body(
    503,
    "The engine is currently busy and cannot accept new requests. Please try again later or "
    "on a different instance.",
    "Service Unavailable",
)
# vLLM 0.32: the process exits this long after SIGTERM in error_event and abort (measured
# 0.5 s on a quiet machine, 1.0-1.6 s beside two busy loops)
ERROR_EXIT_S = 0.5

# vLLM 0.32's endings when its engine stops with streams open, weighted by how often each
# came (benchmarks/bench_engine_sigterm.py, docs/facts.md). At SIGTERM with
# --shutdown-timeout 0, 23 SIGTERMs: quiet 5 hang, 1 error event, 2 abort; beside two busy
# loops 5 hang, 7 error event; during a build 2 hang, 1 error event. At a drain's deadline
# the engine core is killed, never asked to abort (source: v1/engine/core.py): 6 deadlines
# gave 4 error events and 2 hangs. The two streams of one stop always ended alike, so the
# race is drawn once per process.
RACE_WEIGHTS = {"hang": 12, "error_event": 9, "abort": 2}
DEADLINE_WEIGHTS = {"hang": 2, "error_event": 4}


# a P/D decode's KV pull from a prefill engine that is gone, in progress for ever (not a
# fault a request can ask for: pd_kv_read_lost hang)
KV_PULL_HANG = "kv_pull_hang"


@dataclass
class Fault:
    kind: str
    after_tokens: int = 0
    status: int = 503
    message: str = "injected engine error"


def parse_fault(value: str) -> Fault:
    """`kind` or `kind=N` (N: tokens before a mid-stream fault, or the HTTP status)."""
    kind, _, arg = value.strip().partition("=")
    if kind not in FAULT_KINDS:
        raise BadRequest(400, f"unknown fault {kind!r}; use one of {', '.join(FAULT_KINDS)}")
    try:
        n = int(arg) if arg else None
    except ValueError:
        raise BadRequest(400, f"fault argument must be a number: {value!r}") from None
    if kind == "http_error":
        return Fault(kind, status=n or 503)
    return Fault(kind, after_tokens=3 if n is None else n)


class Ending(StrEnum):
    """How a stream still open ends when the engine stops (settings' shutdown_mode)."""

    ABORT = "abort"  # finish_reason abort (and [DONE]): vLLM's default at SIGTERM
    HANG = "hang"  # no more bytes; the socket stays open until the client leaves
    ERROR_EVENT = "error_event"  # an error event and [DONE], no finish chunk
    LEGACY = "legacy"  # pre-0.18: the stream closes with neither finish nor [DONE]


@dataclass(eq=False)
class Stream:
    """One in-flight request, as the engine sees it."""

    request_id: str
    ending: Ending | None = None  # set when the engine stops, or at admission in a drain
    woken: asyncio.Event = field(default_factory=asyncio.Event)


class Metrics:
    def __init__(self, model: str):
        self.registry = CollectorRegistry()
        labels = {"model_name": model, "engine": "0"}
        names = list(labels)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=self.registry).labels(**labels)

        self.running = gauge("vllm:num_requests_running", "Requests in decode.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting for a slot.")
        self.kv_cache = gauge("vllm:kv_cache_usage_perc", "KV cache usage (0-1).")
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "TTFT.",
            names,
            registry=self.registry,
            buckets=TTFT_BUCKETS,
        ).labels(**labels)
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "E2E latency.",
            names,
            registry=self.registry,
            buckets=REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        # vllm:inter_token_latency_seconds, one observation per token after a stream's
        # first: counted in plain lists and read at scrape time, as generation_tokens is
        self.itl_counts = [0] * (len(ITL_BUCKETS) + 1)
        self.itl_sum = 0.0
        self.registry.register(_ItlHistogram(self, labels))
        self._success = Counter(
            "vllm:request_success_total",
            "Finished requests.",
            names + ["finished_reason"],
            registry=self.registry,
        )
        # Counted with a plain int and read at scrape time: a Counter.inc() per token
        # (a lock and three Python calls) was a measurable share of each token's cost.
        self.generation_tokens = 0
        self.registry.register(_TokenCounter(self, labels))
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens_total", "Prompt tokens.", names, registry=self.registry
        ).labels(**labels)
        self._labels = labels

    def success(self, reason: str) -> None:
        self._success.labels(**self._labels, finished_reason=reason).inc()


# vLLM 0.32's default buckets (vllm/v1/metrics/buckets.py), so that what is read from the
# simulator's histograms reads alike from a real engine's
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class _ItlHistogram(Collector):
    """vllm:inter_token_latency_seconds, from Metrics.itl_counts when scraped."""

    def __init__(self, metrics: Metrics, labels: dict[str, str]):
        self._metrics, self._labels = metrics, labels

    def collect(self):
        m = self._metrics
        family = HistogramMetricFamily(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels=list(self._labels),
        )
        running, buckets = 0, []
        for bound, n in zip([*ITL_BUCKETS, float("inf")], m.itl_counts, strict=True):
            running += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        family.add_metric(list(self._labels.values()), buckets, m.itl_sum)
        yield family


class _TokenCounter(Collector):
    """vllm:generation_tokens_total, read from Metrics.generation_tokens when scraped."""

    def __init__(self, metrics: Metrics, labels: dict[str, str]):
        self._metrics, self._labels, self._created = metrics, labels, time.time()

    def collect(self):
        family = CounterMetricFamily(
            "vllm:generation_tokens", "Generated tokens.", labels=list(self._labels)
        )
        family.add_metric(
            list(self._labels.values()), self._metrics.generation_tokens, created=self._created
        )
        yield family


# Tokens one stream may send in a row when behind schedule before the others get a turn.
_CATCH_UP_TOKENS = 64


class DecodeClock:
    """Runs due decode steps, one event-loop timer per millisecond for all streams.

    Like an engine step, one timer callback writes the tokens of every stream due in
    that millisecond: no timer, future and task wake-up per token, which on a busy
    simulator cost as much as the write itself. The loop's timers have millisecond
    resolution anyway.
    """

    def __init__(self) -> None:
        self._due: dict[int, list[Decode]] = {}

    def schedule(self, decode: Decode) -> None:
        # Nearest millisecond, as the loop's own call_later rounds: ceil would add
        # half a millisecond to every token on top of the loop's millisecond clock.
        ms = round(decode.next_at * 1000)
        due = self._due.get(ms)
        if due is None:
            due = self._due[ms] = []
            asyncio.get_running_loop().call_at(ms / 1000, self._fire, ms)
        due.append(decode)

    def _fire(self, ms: int) -> None:
        for decode in self._due.pop(ms):
            decode.step()


class Decode:
    """The plain content tokens of one stream, tokens[sent:stop], written on schedule.

    The stream's own coroutine sends everything else (role, faults, finish, usage,
    [DONE]) and waits in run() while the clock writes the tokens.
    """

    def __init__(
        self,
        app: SimApp,
        stream: Stream,
        send: Send,
        chunk: Callable[[str], bytes],
        tokens: list[str],
        disconnected: asyncio.Event,
        *,
        first_at: float,
        on_first: Callable[[], None],
        last: Callable[[str], bytes] | None = None,
    ):
        self.engine, self.app, self.stream, self.send = app.engine, app, stream, send
        self.chunk, self.tokens, self.disconnected = chunk, tokens, disconnected
        self.sent = self.stop = 0
        self.next_at = first_at
        self.on_first: Callable[[], None] | None = on_first
        self.last = last  # the chunk of the answer's last token: it carries the finish
        self.written_at: float | None = None  # the last token's (the inter-token latency)
        self._waiter: asyncio.Future | None = None

    def over(self) -> bool:
        return decode_over(self.stream, self.disconnected)

    async def run(self, stop: int) -> None:
        """Send tokens up to index stop, unless the stream is ended or the client left."""
        self.stop = min(stop, len(self.tokens))
        loop = asyncio.get_running_loop()
        while self.sent < self.stop and not self.over():
            self._waiter = loop.create_future()
            self.engine.clock.schedule(self)
            blocked = await self._waiter
            if blocked is not None:
                await _finish_send(*blocked)

    def step(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # the stream's task was cancelled
            return
        try:
            self._write_due(waiter)
        except Exception as exc:  # the stream's task raises it, as an awaited send would
            waiter.set_exception(exc)

    def _write_due(self, waiter: asyncio.Future) -> None:
        engine = self.engine
        for _ in range(_CATCH_UP_TOKENS):
            if self.over():
                break
            now = time.monotonic()
            engine.lag_s.append(now - self.next_at)
            token = self.tokens[self.sent]
            is_last = self.last is not None and self.sent == len(self.tokens) - 1
            message = {
                "type": "http.response.body",
                "body": self.last(token) if is_last else self.chunk(token),
                "more_body": True,
            }
            self.sent += 1
            engine.events_sent += 1
            metrics = engine.metrics
            metrics.generation_tokens += 1
            if self.on_first is not None:
                self.on_first()
                self.on_first = None
            elif self.written_at is not None:
                gap = now - self.written_at
                metrics.itl_counts[bisect_left(ITL_BUCKETS, gap)] += 1
                metrics.itl_sum += gap
            self.written_at = now
            self.next_at += self.app._gap_s()
            send = self.send(message)
            try:
                awaited = send.send(None)
            except StopIteration:
                pass  # written: the usual case
            else:
                # The client reads slower than we write and the server waits for the
                # socket to drain: the stream's own task finishes this send.
                engine.blocked_sends += 1
                waiter.set_result((send, awaited))
                return
            if self.sent >= self.stop:
                break
            if self.next_at > now:
                engine.clock.schedule(self)
                return
            # Behind schedule: the next token is due already, send it now.
        else:
            engine.clock.schedule(self)  # far behind: let other streams have the loop
            return
        waiter.set_result(None)


async def _finish_send(send: Coroutine, awaited: asyncio.Future | None) -> None:
    """Drive a send coroutine that suspended on its first step, as a Task would:
    wait for what it awaits, then resume it, until it returns."""
    while True:
        try:
            if awaited is None:
                await asyncio.sleep(0)  # a bare yield
            else:
                await asyncio.wait([awaited])
        except asyncio.CancelledError:
            send.close()
            raise
        try:
            awaited = send.send(None)
        except StopIteration:
            return


class Engine:
    """Sequence slots, a FIFO waiting queue and the shutdown state machine."""

    def __init__(self, settings: SimSettings, on_exit: Callable[[], None]):
        self.s = settings
        self.on_exit = on_exit
        self.ready = settings.startup_s == 0
        self.draining = False
        self.ended_how: Ending | None = None  # how open streams were ended (the engine stopped)
        self.on_close_listener: Callable[[], None] = lambda: None
        self._exit_scheduled = False
        self.running = 0
        self.waiting: collections.deque[asyncio.Future] = collections.deque()
        self.fetching = 0  # requests on a KV pull that never ends (pd_kv_read_lost hang)
        self.streams: set[Stream] = set()
        self.metrics = Metrics(settings.model)
        self.rng = random.Random(settings.seed)
        self.clock = DecodeClock()
        self.lag_s: collections.deque[float] = collections.deque(maxlen=200_000)
        self.events_sent = 0
        self.blocked_sends = 0
        self._t0 = time.monotonic()
        self._cpu0 = resource.getrusage(resource.RUSAGE_SELF)

    # --- slots -------------------------------------------------------------
    async def admit(self, stream: Stream) -> bool:
        """Wait for a sequence slot; False if the stream was ended while waiting."""
        if self.running < self.s.max_num_seqs and not self.waiting:
            self._take_slot()
            return True
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self._show_waiting()
        ender = asyncio.ensure_future(stream.woken.wait())
        try:
            await asyncio.wait({fut, ender}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ender.cancel()
        if fut.done() and not fut.cancelled():
            return True  # the slot was handed over by release()
        fut.cancel()
        self.waiting.remove(fut)
        self._show_waiting()
        return False

    def _show_waiting(self) -> None:
        self.metrics.waiting.set(len(self.waiting) + self.fetching)

    async def fetch_forever(self, stream: Stream) -> None:
        """A KV pull from a prefill engine that is gone, never noticed (pd_kv_read_lost
        hang): the request waits, counted among the waiting as vLLM counts a request
        WAITING_FOR_REMOTE_KVS, and never takes a slot, until its client leaves or the
        engine stops."""
        self.fetching += 1
        self._show_waiting()
        try:
            await stream.woken.wait()
        finally:
            self.fetching -= 1
            self._show_waiting()

    def _take_slot(self) -> None:
        self.running += 1
        self.metrics.running.set(self.running)
        self.metrics.kv_cache.set(self.running / self.s.max_num_seqs)

    def release(self) -> None:
        self.running -= 1
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                self._take_slot()
                fut.set_result(None)
                break
        self._show_waiting()
        self.metrics.running.set(self.running)
        self.metrics.kv_cache.set(self.running / self.s.max_num_seqs)

    # --- shutdown ----------------------------------------------------------
    def busy(self) -> bool:
        """Admission limit reached (--max-num-queued-reqs N): a new request gets 503.
        Measured on vLLM 0.32 with one busy slot: N admits N - 1 waiting requests."""
        limit = self.s.max_num_queued_reqs
        full = self.running >= self.s.max_num_seqs
        return bool(limit) and full and len(self.waiting) >= limit - 1

    def begin_shutdown(self) -> None:
        """SIGTERM: drain for shutdown_timeout_s, or end every stream now (vLLM's default)."""
        if self.draining:
            return
        self.draining = True
        if self.s.shutdown_timeout_s > 0:
            loop = asyncio.get_running_loop()
            loop.call_later(self.s.shutdown_timeout_s, self._drain_deadline)
            self.maybe_exit()
        else:
            self.stop_engine()

    def _drain_deadline(self) -> None:
        # only streams still open meet the deadline; a finished drain is in its teardown
        if self.streams:
            self.stop_engine(DEADLINE_WEIGHTS)

    def stop_engine(self, race: dict[str, int] = RACE_WEIGHTS) -> None:
        """The engine stops serving: streams still open end as shutdown_mode says (race:
        drawn from `race`, the endings measured for this kind of stop)."""
        if self.ended_how is not None:
            return
        how = self.s.shutdown_mode
        if how == "race":
            how = race_ending(self.s.seed, self.s.port, race)
        how = Ending(how)
        self.ended_how = how
        if how in RACE_WEIGHTS:
            self.on_close_listener()  # vLLM 0.32 closes its listener within 0.16 s
        for stream in list(self.streams):
            stream.ending = how
            stream.woken.set()
        if how in (Ending.ERROR_EVENT, Ending.ABORT):
            asyncio.get_running_loop().call_later(ERROR_EXIT_S, self.on_exit)
            self._exit_scheduled = True
        self.maybe_exit()

    def maybe_exit(self) -> None:
        """Exit once no stream is left: at once when the engine was stopped (in hang
        mode, once the clients of the hung streams have gone), after the teardown when a
        drain finished cleanly."""
        if not self.draining or self.streams or self._exit_scheduled:
            return
        self._exit_scheduled = True
        if self.ended_how is not None:
            self.on_exit()
        else:
            asyncio.get_running_loop().call_later(self.s.shutdown_teardown_s, self.on_exit)

    def stats(self) -> dict:
        lags = sorted(self.lag_s)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = ru.ru_utime + ru.ru_stime - self._cpu0.ru_utime - self._cpu0.ru_stime
        wall_s = time.monotonic() - self._t0
        return {
            "events_sent": self.events_sent,
            "blocked_sends": self.blocked_sends,
            "lag_p50_s": quantile_of_sorted(lags, 0.50),
            "lag_p99_s": quantile_of_sorted(lags, 0.99),
            "lag_samples": len(lags),
            "cpu_s": cpu_s,
            "wall_s": wall_s,
            "running": self.running,
            "waiting": len(self.waiting),
        }

    def reset_stats(self) -> None:
        self.lag_s.clear()
        self.events_sent = 0
        self._t0 = time.monotonic()
        self._cpu0 = resource.getrusage(resource.RUSAGE_SELF)


@dataclass
class Request:
    request_id: str
    chat: bool
    stream: bool
    prompt: str
    max_tokens: int | None
    ignore_eos: bool
    min_tokens: int
    seed: int
    include_usage: bool
    fault: Fault | None
    model: str = ""  # the model the request named: the base model's name or an adapter's
    adapter: tuple[int, str] | None = None  # its adapter's id and weights
    data: dict = field(default_factory=dict)  # the body as sent (a P/D sidecar passes it on)
    kv_transfer_params: dict | None = None  # P/D: what the sidecar asks of this engine
    remote_kv: bool = False  # decoded from a KV another engine computed


def parse_request(
    body: bytes, chat: bool, settings: SimSettings, headers: dict, adapters: Adapters | None = None
) -> Request:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "request body must be a JSON object")
    model = data.get("model", settings.model)
    adapter = adapters.weights(model) if adapters is not None and isinstance(model, str) else None
    if model != settings.model and adapter is None:
        raise BadRequest(
            404,
            f"The model `{model}` does not exist. Valid aliases: {settings.model}.",
            "NotFoundError",
            param="model",
        )
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(400, "'messages' is required and must be a non-empty list")
        parts = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise BadRequest(400, "each message must be an object with a 'role'")
            content = m.get("content") or ""
            parts.append(content if isinstance(content, str) else json.dumps(content))
        prompt = "\n".join(parts)
    else:
        prompt = data.get("prompt")
        if isinstance(prompt, list):
            prompt = "".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise BadRequest(400, "'prompt' is required")
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest(400, f"max_tokens must be at least 1, got {max_tokens}.")
    if settings.max_model_len and max_tokens is not None and max_tokens > settings.max_model_len:
        raise BadRequest(
            400,
            f"max_tokens={max_tokens} cannot be greater than max_model_len="
            f"{settings.max_model_len}. Please request fewer output tokens. "
            f"(parameter=max_tokens, value={max_tokens})",
            param="max_tokens",
        )
    stream_options = data.get("stream_options") or {}
    fault = None
    if FAULT_HEADER in headers:
        fault = parse_fault(headers[FAULT_HEADER])
    rid = headers.get("x-request-id") or uuid.uuid4().hex
    return Request(
        request_id=rid,
        chat=chat,
        stream=bool(data.get("stream", False)),
        prompt=prompt,
        max_tokens=max_tokens,
        ignore_eos=bool(data.get("ignore_eos", False)),
        min_tokens=int(data.get("min_tokens") or 0),
        seed=int(data.get("seed") or 0),
        include_usage=bool(stream_options.get("include_usage", False)),
        fault=fault,
        model=model,
        adapter=adapter,
        data=data,
        kv_transfer_params=data.get("kv_transfer_params")
        if isinstance(data.get("kv_transfer_params"), dict)
        else None,
    )


class SimApp:
    def __init__(self, settings: SimSettings, on_exit: Callable[[], None] = lambda: None):
        self.s = settings
        self.engine = Engine(settings, on_exit)
        self.fingerprint = f"fp_{settings.model_version}"
        self.adapters = Adapters(settings.model, settings.stale_lora_reload)
        weights = settings.weights or settings.model_version
        self.pd = PD(settings, weights) if settings.pd_role else None

    def _authorized(self, scope: Scope) -> bool:
        key = self.s.api_key or os.environ.get("VLLM_API_KEY", "")
        if not key:
            return True
        headers = dict(scope.get("headers") or [])
        return headers.get(b"authorization", b"").decode("latin-1") == f"Bearer {key}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if path in ("/health", "/ping"):
                await self._health(send)
            elif self.pd is not None and path.startswith(KV_PATH) and method == "GET":
                # the P/D side channel (NIXL's handshake and read), no API key
                status, obj = self.pd.read(path[len(KV_PATH) :])
                await _respond_json(send, status, obj)
            elif path.startswith("/v1") and not self._authorized(scope):
                # vLLM's middleware: a bare {"error": "Unauthorized"} with 401
                await _respond_json(send, 401, {"error": "Unauthorized"})
            elif not self.engine.ready:
                await _respond(send, 503, error_body(503, "engine starting", "ServiceUnavailable"))
            elif path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
                await self._completions(
                    scope, receive, send, chat=path.endswith("chat/completions")
                )
            elif path == "/v1/models":
                await _respond_json(send, 200, self._models())
            elif self.s.runtime_lora and method == "POST" and path in LORA_PATHS:
                await self._lora(path, receive, send)
            elif path == "/version":
                await _respond_json(send, 200, {"version": f"rollcheck-sim {self.s.model_version}"})
            elif path == "/metrics":
                await _respond(
                    send, 200, generate_latest(self.engine.metrics.registry), b"text/plain"
                )
            elif path == "/sim/stats":
                if method == "DELETE":
                    self.engine.reset_stats()
                await _respond_json(send, 200, self.engine.stats())
            else:
                await _respond(send, 404, error_body(404, f"Not Found: {path}", "NotFoundError"))
        except BadRequest as exc:
            body = error_body(exc.status, exc.message, exc.err_type, exc.param)
            await _respond(send, exc.status, body)

    async def _health(self, send: Send) -> None:
        if not self.engine.ready:
            status = 503
        elif self.engine.draining:
            status = self.s.drain_health
        else:
            status = 200
        await _respond(send, status, b"")

    def _models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.s.model,
                    "object": "model",
                    "created": 0,
                    "owned_by": "rollcheck",
                    "root": self.s.model,
                    "max_model_len": self.s.max_model_len or 8192,
                },
                *self.adapters.cards(),
            ],
        }

    async def _lora(self, path: str, receive: Receive, send: Send) -> None:
        """Load or unload an adapter (harness/sim/adapters.py): 200 with vLLM's text."""
        body = await _read_body(receive)
        try:
            data = json.loads(body)
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
        act = self.adapters.load if path == LORA_PATHS[0] else self.adapters.unload
        try:
            said = act(data)
        except AdapterError as exc:
            raise BadRequest(exc.status, exc.message, exc.err_type) from None
        _log(f"{said}")
        await _respond(send, 200, said.encode(), b"text/plain; charset=utf-8")

    def _pick_fault(self) -> Fault | None:
        s, r = self.s, self.engine.rng.random()
        for kind, rate in (
            ("http_error", s.fault_http_error_rate),
            ("error_event", s.fault_error_event_rate),
            ("stall", s.fault_stall_rate),
            ("crash", s.fault_crash_rate),
        ):
            if r < rate:
                return Fault(kind, after_tokens=s.fault_after_tokens, status=s.fault_http_status)
            r -= rate
        return None

    async def _completions(self, scope: Scope, receive: Receive, send: Send, chat: bool) -> None:
        body = await _read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        req = parse_request(body, chat, self.s, headers, self.adapters)
        fault = req.fault or self._pick_fault()
        if fault and fault.kind == "http_error":
            msg = f"injected error {fault.status}"
            await _respond(send, fault.status, error_body(fault.status, msg, "ServiceUnavailable"))
            return
        if self.engine.draining and (
            self.s.drain_new_requests == "500" or self.engine.ended_how is not None
        ):
            # vLLM 0.32 refuses new work while it drains, and closes the connection
            await _respond(send, 500, SHUTDOWN_500, close=True)
            return
        if self.engine.draining and self.s.drain_new_requests == "503":
            await _respond(
                send, 503, error_body(503, "server is shutting down", "ServiceUnavailable")
            )
            return
        if self.engine.busy():
            await _respond(send, 503, BUSY_503)
            return
        weights = self.s.weights or self.s.model_version
        if req.adapter is not None:  # the adapter's weights over the base model's
            weights += f"+lora:{req.adapter[1]}"
        extra: dict = {}
        if self.pd is not None:
            try:
                weights, fault, extra = await self._pd(req, scope["path"], headers, weights, fault)
            except PrefillFailed as exc:
                # llm-d's sidecar: the prefill's status, no body (502 where none came)
                _log(f"P/D {req.request_id}: {exc.why}")
                await _respond(send, exc.status, b"")
                return
            if fault is not None and fault.kind == "error_event" and not req.stream:
                err = error_body(500, fault.message, "InternalServerError")
                await _respond(send, 500, err)
                return
        tokens, finish = text.answer(
            req.prompt,
            req.seed + self.s.seed,
            weights,
            max_tokens=req.max_tokens,
            ignore_eos=req.ignore_eos,
            min_tokens=req.min_tokens,
            natural_min=self.s.min_answer_tokens,
            natural_max=self.s.max_answer_tokens,
            degraded=self.s.degraded,
        )
        name = ("chatcmpl-" if req.chat else "cmpl-") + req.request_id
        if self.s.enable_log_requests:  # vLLM 0.32's request_logger.py line
            _log(
                f"Received request {name}: params: SamplingParams(max_tokens={req.max_tokens}, "
                f"seed={req.seed}), lora_request: {_lora_request(req)}."
            )
        stream = Stream(req.request_id)
        if self.engine.draining:
            stream.ending = Ending.ABORT  # vLLM: accepted during drain, then aborted
        self.engine.streams.add(stream)
        disconnected = asyncio.Event()
        watcher = asyncio.ensure_future(_watch_disconnect(receive, disconnected, stream))
        try:
            if fault is not None and fault.kind == KV_PULL_HANG and not req.stream:
                await self.engine.fetch_forever(stream)
                if not disconnected.is_set():  # the engine stopped under it
                    await _respond(send, 500, SHUTDOWN_500, close=True)
                return
            if req.stream:
                await StreamAnswer(
                    self, req, stream, tokens, finish, fault, send, disconnected
                ).run()
            else:
                await self._unary(req, stream, tokens, finish, send, extra)
        finally:
            watcher.cancel()
            self.engine.streams.discard(stream)
            self.engine.maybe_exit()

    async def _pd(
        self, req: Request, path: str, headers: dict, weights: str, fault: Fault | None
    ) -> tuple[str, Fault | None, dict]:
        """A P/D engine's part in a request (harness/sim/pd.py): the prefill role holds
        its KV and names it in the answer; the decode role prefills it at the prefill
        Service (unless the params name a KV already) and reads the KV. The weights the
        answer comes from, the fault a failed read makes, and what the answer carries."""
        pd, params = self.pd, req.kv_transfer_params or {}
        if self.s.pd_role == "prefill":
            if params.get("do_remote_decode"):
                return (
                    weights,
                    fault,
                    {"kv_transfer_params": pd.hold(req.request_id, text.prompt_tokens(req.prompt))},
                )
            return weights, fault, {}
        if not params.get("do_remote_prefill"):
            if not self.s.pd_prefill_url:  # the engine alone, asked directly: its own prefill
                return weights, fault, {}
            try:
                params = await pd.prefill(path, req.data, headers)
            except PrefillFailed as exc:
                if not self.s.pd_prefill_fallback:
                    raise
                _log(f"P/D {req.request_id}: {exc.why}; prefilled here instead (fallback)")
                return weights, fault, {}
        loaded = await pd.load(params)
        name = ("chatcmpl-" if req.chat else "cmpl-") + req.request_id
        if loaded.weights is not None:
            req.remote_kv = True
            _log(f"P/D {name}: KV from {loaded.remote} (weights {loaded.weights})")
            return mixed_weights(loaded.weights, weights), fault, {}
        if loaded.lost and self.s.pd_kv_read_lost == "hang":
            _log(f"P/D {name}: {loaded.why}; KV fetch: 1 in progress, with no timeout")
            return weights, Fault(KV_PULL_HANG), {}
        if self.s.pd_kv_load_failure == "recompute":
            _log(f"P/D {name}: {loaded.why}; its prefill computed here again")
            return weights, fault, {}
        _log(f"P/D {name}: {loaded.why}; the request fails (kv_load_failure_policy fail)")
        return weights, Fault("error_event", after_tokens=0, message="Internal server error"), {}

    def _chunk(
        self, req: Request, created: int, choice: dict | None, terminal: bool = False, **extra
    ) -> bytes:
        obj: dict = {
            "id": ("chatcmpl-" if req.chat else "cmpl-") + req.request_id,
            "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": created,
            "model": req.model or self.s.model,
            "choices": [choice] if choice is not None else [],
        }
        if terminal:  # vLLM 0.32 puts system_fingerprint on the last JSON chunk only
            obj["system_fingerprint"] = self.fingerprint
        obj.update(extra)
        if self.s.send_timestamps:
            obj["rollcheck_sent_at"] = time.time()
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def _content_chunk_encoder(self, req: Request, created: int) -> Callable[[str], bytes]:
        """token -> its content chunk, byte-identical to _chunk.

        Content chunks of one stream differ only in their text, so everything around
        the text is encoded once and each token costs two byte joins instead of a
        dict build and a json.dumps (the largest per-token cost in the simulator).
        """
        if not self.s.send_timestamps:
            whole = self._chunk(req, created, self._choice(req, _MARK, None))
            parts = whole.split(_MARK_JSON)
            if len(parts) == 2:
                head, tail = parts
                return lambda token: head + _json_str(token) + tail
        return lambda token: self._chunk(req, created, self._choice(req, token, None))

    def _choice(self, req: Request, content: str | None, finish: str | None) -> dict:
        if req.chat:
            delta = {} if content is None else {"content": content}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}
        if finish is not None:
            choice["stop_reason"] = None
        return choice

    def _first_token_delay_s(self, req: Request) -> float:
        if req.remote_kv:  # prefilled elsewhere: the decode's first step only
            return self.s.itl_s
        prefill = self.s.prefill_s_per_1k_tokens * text.prompt_tokens(req.prompt) / 1000
        return self.s.ttft_s + prefill

    def _gap_s(self) -> float:
        if self.s.itl_jitter_s:
            return self.s.itl_s + self.engine.rng.uniform(0, self.s.itl_jitter_s)
        return self.s.itl_s

    async def _unary(self, req, stream, tokens, finish, send, extra: dict | None = None) -> None:
        engine = self.engine
        admitted = stream.ending is None and await engine.admit(stream)
        try:
            total = self._first_token_delay_s(req) + self.s.itl_s * max(0, len(tokens) - 1)
            if admitted:
                try:
                    await asyncio.wait_for(stream.woken.wait(), total)
                except TimeoutError:
                    pass
            if stream.ending == Ending.HANG:
                await asyncio.Event().wait()
            if stream.ending is not None:
                tokens, finish = [], "abort"
            pt = text.prompt_tokens(req.prompt)
            usage = {
                "prompt_tokens": pt,
                "completion_tokens": len(tokens),
                "total_tokens": pt + len(tokens),
            }
            content = "".join(tokens)
            if req.chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": content}}
                obj_type, prefix = "chat.completion", "chatcmpl-"
            else:
                choice = {"index": 0, "text": content}
                obj_type, prefix = "text_completion", "cmpl-"
            choice.update(logprobs=None, finish_reason=finish, stop_reason=None)
            body = {
                "id": prefix + req.request_id,
                "object": obj_type,
                "created": int(time.time()),
                "model": req.model or self.s.model,
                "system_fingerprint": self.fingerprint,
                "choices": [choice],
                "usage": usage,
                **(extra or {}),
            }
            engine.metrics.success(finish)
            engine.metrics.generation_tokens += len(tokens)
            await _respond_json(send, 200, body)
        finally:
            if admitted:
                engine.release()


DONE = b"data: [DONE]\n\n"


class StreamAnswer:
    """One streamed answer, phase by phase as vLLM 0.32 sends it: headers, the role chunk
    (with the first token: a queued request gets headers and then nothing), the decode,
    an injected fault, and the finish (the finish chunk, usage, [DONE]) or the ending the
    engine's stop gave the stream (`Ending`)."""

    def __init__(self, app: SimApp, req, stream: Stream, tokens, finish, fault, send, disconnected):
        self.app, self.s, self.engine = app, app.s, app.engine
        self.metrics = app.engine.metrics
        self.req, self.stream, self.tokens, self.finish = req, stream, tokens, finish
        self.fault: Fault | None = fault
        self.send, self.disconnected = send, disconnected
        self.created = int(time.time())
        self.t_start = time.monotonic()
        self.sent_tokens = 0
        self.admitted = False
        self.role_sent = False
        self.rode_last = False  # the last token's chunk carried the finish_reason
        self.held = b""  # the context's memory while in flight (memory_mb_per_1k_tokens)
        self._decode: Decode | None = None
        # A mid-stream fault fires before token N; an answer of N tokens or fewer never meets it.
        self.midstream = (
            fault is not None and fault.kind != "http_error" and fault.after_tokens < len(tokens)
        )

    async def run(self) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        if self.s.enable_request_id_headers:
            headers.append((b"x-request-id", self.req.request_id.encode()))
        await self.send({"type": "http.response.start", "status": 200, "headers": headers})
        keepalive = None
        if self.s.sse_keep_alive_interval_s > 0:
            keepalive = asyncio.ensure_future(
                _keep_alive(self.send, self.s.sse_keep_alive_interval_s)
            )
        try:
            if self.fault is not None and self.fault.kind == KV_PULL_HANG:
                await self.engine.fetch_forever(self.stream)  # headers, then not one byte
                await self.end()
                return
            first_at = await self.admit()
            await self.role_chunk()
            await self.decode(first_at)
            if await self.fault_fired():
                return
            await self.end()
        finally:
            if keepalive:
                keepalive.cancel()
            self.held = b""  # the context's memory goes with the request
            if self.admitted:
                self.engine.release()
            await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    def _hold_memory(self) -> bytes:
        """The context's memory (settings.memory_mb_per_1k_tokens), written so that it is
        resident: what a memory limit counts, and what the kernel's OOM killer sees."""
        rate = self.s.memory_mb_per_1k_tokens
        if not rate or not self.admitted:
            return b""
        context = text.prompt_tokens(self.req.prompt) + len(self.tokens)
        return b"\x01" * int(rate * context / 1000 * 2**20)

    async def emit(self, data: bytes) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": True})
        self.engine.events_sent += 1

    def chunk(self, choice, terminal: bool = False, **extra) -> bytes:
        return self.app._chunk(self.req, self.created, choice, terminal=terminal, **extra)

    async def admit(self) -> float:
        """Wait for a place in the batch and the first token's delay; returns when the
        first token is due."""
        if self.stream.ending is None:
            self.admitted = await self.engine.admit(self.stream)
        self.held = self._hold_memory()  # the prompt's context is held from its prefill on
        self.metrics.prompt_tokens.inc(text.prompt_tokens(self.req.prompt))
        first_at = time.monotonic() + self.app._first_token_delay_s(self.req)
        if self.admitted and self.stream.ending is None:
            try:
                await asyncio.wait_for(
                    self.stream.woken.wait(), max(0.0, first_at - time.monotonic())
                )
            except TimeoutError:
                pass
        return first_at

    def _role(self) -> dict:
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
        role.update(logprobs=None, finish_reason=None)
        return role

    async def role_chunk(self) -> None:
        self.role_sent = (
            self.req.chat and self.admitted and not decode_over(self.stream, self.disconnected)
        )
        if self.role_sent:
            await self.emit(self.chunk(self._role()))

    async def decode(self, first_at: float) -> None:
        req, tokens = self.req, self.tokens
        last = None
        if not req.include_usage and not self.midstream:
            # vLLM 0.32 without include_usage: the last token rides on the finish chunk
            def last(token: str) -> bytes:
                return self.chunk(self.app._choice(req, token, self.finish), terminal=True)

        decode = Decode(
            self.app,
            self.stream,
            self.send,
            self.app._content_chunk_encoder(req, self.created),
            tokens,
            self.disconnected,
            first_at=first_at,
            on_first=lambda: self.metrics.ttft.observe(time.monotonic() - self.t_start),
            last=last,
        )
        await decode.run(self.fault.after_tokens if self.midstream else len(tokens))
        self.sent_tokens = decode.sent
        self.rode_last = last is not None and bool(tokens) and self.sent_tokens == len(tokens)
        self._decode = decode

    async def fault_fired(self) -> bool:
        """An injected mid-stream fault, at its token: True when it ended the stream."""
        fault = self.fault
        if not self.midstream or self.sent_tokens != fault.after_tokens or self._decode.over():
            return False
        if fault.kind == "error_event":
            err = {"message": fault.message, "type": "InternalServerError"}
            err.update(param=None, code=500)
            await self.emit(b"data: " + json.dumps({"error": err}).encode() + b"\n\n")
            await self.emit(DONE)
            return True
        if fault.kind == "stall":
            await self.stream.woken.wait()  # until shutdown ends it or the client leaves
        if fault.kind == "crash":
            os._exit(3)
        return False

    async def end(self) -> None:
        """The stream's last bytes: as the engine's stop ended it, or the finish."""
        ending = self.stream.ending
        if self.disconnected.is_set():
            self.metrics.success("abort")
            return
        if ending == Ending.HANG:
            # no more bytes; vLLM 0.32 holds the socket until the client gives up
            # (or SIGKILL), and exits once every such client has gone
            await self.disconnected.wait()
            return
        if ending == Ending.ERROR_EVENT:
            # no finish chunk and no usage chunk, even with include_usage
            await self.emit(b"data: " + json.dumps(ENGINE_CORE_ERROR).encode() + b"\n\n")
            await self.emit(DONE)
            self.metrics.success("error")
            return
        if ending == Ending.LEGACY:
            return  # pre-0.18: the stream closes with neither finish nor [DONE]
        if ending == Ending.ABORT and self.req.chat and self.sent_tokens == 0:
            # vLLM 0.32 (measured): a request aborted before its first token, still
            # queued at SIGTERM, gets the role chunk and [DONE], and no finish chunk
            if not self.role_sent:
                await self.emit(self.chunk(self._role()))
            await self.emit(DONE)
            self.metrics.success("abort")
        elif ending == Ending.ABORT and self.sent_tokens < len(self.tokens):
            await self.finish_with("abort")
        else:
            await self.finish_with(self.finish)
        self.metrics.e2e.observe(time.monotonic() - self.t_start)

    async def finish_with(self, reason: str | None) -> None:
        """The finish chunk (unless the last token carried it), usage, [DONE]."""
        req = self.req
        if reason is not None:
            if not self.rode_last:
                choice = self.app._choice(req, None, reason)
                await self.emit(self.chunk(choice, terminal=not req.include_usage))
            self.metrics.success(reason)
        if req.include_usage and reason is not None:
            prompt = text.prompt_tokens(req.prompt)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": self.sent_tokens,
                "total_tokens": prompt + self.sent_tokens,
            }
            await self.emit(self.chunk(None, terminal=True, usage=usage))
        await self.emit(DONE)


LORA_PATHS = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")


def _lora_request(req: Request) -> str:
    """vLLM's request log names the adapter a request runs on (None for the base model)."""
    if req.adapter is None:
        return "None"
    return f"LoRARequest(lora_name='{req.model}', lora_int_id={req.adapter[0]})"


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def _log(message: str) -> None:
    """One line on stderr, in vLLM's logger's shape (the level and time first)."""
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"INFO {stamp} [rollcheck-sim] {message}", file=sys.stderr, flush=True)


async def _watch_disconnect(receive: Receive, event: asyncio.Event, stream: Stream) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            event.set()
            stream.woken.set()
            return


async def _keep_alive(send: Send, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        await send({"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True})


def race_ending(seed: int, port: int, weights: dict[str, int] = RACE_WEIGHTS) -> Ending:
    """Which of vLLM 0.32's endings this process takes, weighted as measured: seeded by
    the settings and the port, so a run repeats, and pods of one config differ."""
    endings, counts = zip(*weights.items(), strict=True)
    return Ending(random.Random(f"{seed}:{port}").choices(endings, counts)[0])


def decode_over(stream: Stream, disconnected: asyncio.Event) -> bool:
    return stream.ending is not None or disconnected.is_set()


async def _respond(
    send: Send, status: int, body: bytes, ctype: bytes = b"application/json", close: bool = False
) -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _respond_json(send: Send, status: int, obj: dict) -> None:
    await _respond(send, status, json.dumps(obj).encode())
