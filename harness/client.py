"""One streaming HTTP request -> one StreamRecord, whatever happens.

The read timeout equals the stall timeout, and a stream that only sends
keep-alive comments is given up on too. No exception escapes: every failure
becomes an outcome. A BaseException that ends the caller (a Locust user being
stopped, Ctrl-C) still yields a `cancelled` record through `on_record` before
it propagates, so nothing is lost; a `Cancel` set from another thread ends the
stream at once as `cancelled` (a deadline, a signal).

What a server sends cannot reach another request: the client asks for
`Accept-Encoding: identity` (it judges the bytes as sent; a body in gzip or deflate
anyway, as a misconfigured proxy sends it, is decoded as it arrives, in bounded steps,
and the record names the encoding; another encoding is not_sse, named) and keeps no idle
connection, so bytes past a short Content-Length or after the end of a body go
with their connection. The API key's value is removed from every record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import socket
import ssl
import threading
import time
import urllib.request
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlsplit

import httpx

from harness import http1
from harness.secrets import is_secret_name
from harness.streams import End, StreamObserver, StreamRecord, Thresholds

CONNECT_TIMEOUT_S = 10.0
# the response header a gateway may name the serving pod's address in (rollcheck's own
# nginx does): the live view of which pod holds which stream
UPSTREAM_HEADER = "X-Rollcheck-Upstream"


def new_request_id() -> str:
    return uuid.uuid4().hex


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context, with the CA bundle. httpx builds a new one for every
    client it makes, and httpx.get makes a client per call: about 20 ms of CPU loading the
    bundle each time, and on a machine with more runnable work than cores a poll loop was
    measured stuck in it for up to 21 s (docs/facts.md, "What a client and a reader must
    not trust")."""
    return httpx.create_ssl_context()


def http_get(url: str, timeout: float, **kw) -> httpx.Response:
    """httpx.get, without a new TLS context per call (tls_context): for polls."""
    kw.setdefault("verify", tls_context())
    return httpx.get(url, timeout=timeout, **kw)


def http_post(url: str, timeout: float, **kw) -> httpx.Response:
    """httpx.post, without a new TLS context per call (tls_context)."""
    kw.setdefault("verify", tls_context())
    return httpx.post(url, timeout=timeout, **kw)


def make_client(stall_timeout_s: float, max_connections: int = 1000, **settings) -> StreamClient:
    """The client stream_request reads with. settings: verify (an SSLContext, a CA file's
    path, or False) and headers, for a pod reached through the Kubernetes API server;
    transport="httpx" reads through httpx rather than harness.http1. No connection is kept
    idle for reuse: a server whose framing is wrong (a short Content-Length, bytes after
    the body) would otherwise hand its leftover bytes to the next request as that
    request's answer."""
    return StreamClient(stall_timeout_s, max_connections, **settings)


class StreamClient:
    """Streams, each on a connection of its own, read by harness.http1: a lean HTTP/1.1
    reader, about half httpx's CPU an event under gevent (docs/facts.md). Where an HTTP
    proxy from the environment applies to the URL (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
    less NO_PROXY, read when the client is made, as httpx reads them) the request goes
    through httpx, which speaks to proxies. Both raise the same exceptions by name, so a
    record's error reads the same whichever read it; at most max_connections at once (a
    request past them waits up to the stall timeout, then is a stall, as httpx's pool
    does)."""

    def __init__(
        self,
        stall_timeout_s: float,
        max_connections: int = 1000,
        *,
        verify: ssl.SSLContext | str | bool = True,
        headers: dict | None = None,
        transport: str = "lean",
    ) -> None:
        if transport not in ("lean", "httpx"):
            raise ValueError(f"transport {transport!r}: lean or httpx")
        self.stall_timeout_s = stall_timeout_s
        self.connect_timeout_s = min(CONNECT_TIMEOUT_S, stall_timeout_s)
        self.headers = dict(headers or {})
        self.transport = transport
        self._proxies = urllib.request.getproxies_environment()
        self._tls = _tls_of(verify)
        self._max_connections = max_connections
        self._slots = threading.BoundedSemaphore(max_connections)
        self._httpx: httpx.Client | None = None
        self._lock = threading.Lock()
        self._on_arrival: Callable[[float], None] | None = None

    @property
    def on_arrival(self) -> Callable[[float], None] | None:
        """Given, for each piece of a body read lean over plain http, how long it waited
        in its socket before it was read and time-stamped (seconds): harness.client_delay.
        None: not measured."""
        return self._on_arrival

    @on_arrival.setter
    def on_arrival(self, sink: Callable[[float], None] | None) -> None:
        if sink is not None:
            http1.keep_stamps_on()
        self._on_arrival = sink

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._httpx is not None:
            self._httpx.close()

    @contextlib.contextmanager
    def stream(
        self,
        url: str,
        body: bytes,
        headers: dict[str, str],
        on_socket: Callable[[socket.socket], None] | None = None,
    ) -> Iterator:
        """POST body to url: the response (status_code, headers.get, iter_raw), closed
        when the block ends. on_socket is given the socket once connected."""
        headers = {**self.headers, **headers}
        if self.transport == "httpx" or _proxied(url, self._proxies):
            with self._via_httpx(url, body, headers, on_socket) as response:
                yield response
            return
        if not self._slots.acquire(timeout=self.stall_timeout_s):
            raise http1.PoolTimeout(
                f"all {self._max_connections} connections busy for {self.stall_timeout_s:g} s"
            )
        try:
            response = http1.open_stream(
                url,
                body,
                headers,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.stall_timeout_s,
                tls=self._tls,
                on_socket=on_socket,
                stamped=self.on_arrival is not None,
            )
            try:
                yield response
            finally:
                response.close()
        finally:
            self._slots.release()

    @contextlib.contextmanager
    def _via_httpx(self, url, body, headers, on_socket) -> Iterator[httpx.Response]:
        extensions = {}
        if on_socket is not None:

            def trace(name: str, info: dict) -> None:
                if name.endswith("connect_tcp.complete"):
                    sock = _socket_of_stream(info.get("return_value"))
                    if sock is not None:
                        on_socket(sock)

            extensions["trace"] = trace
        with self._lock:
            if self._httpx is None:
                self._httpx = httpx.Client(
                    timeout=httpx.Timeout(self.stall_timeout_s, connect=self.connect_timeout_s),
                    limits=httpx.Limits(
                        max_connections=self._max_connections, max_keepalive_connections=0
                    ),
                    verify=self._tls,
                )
        with self._httpx.stream(
            "POST", url, content=body, headers=headers, extensions=extensions
        ) as response:
            yield response


def _tls_of(verify: ssl.SSLContext | str | bool) -> ssl.SSLContext:
    if isinstance(verify, ssl.SSLContext):
        return verify
    if verify is True:
        return tls_context()
    if verify is False:
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=verify)


def _proxied(url: str, proxies: dict[str, str]) -> bool:
    """Whether httpx would send url through one of the environment's proxies."""
    if not proxies:
        return False
    parts = urlsplit(url)
    if not (proxies.get(parts.scheme.lower()) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "", proxies)


class Cancel:
    """Ends streams from another thread: `set()` marks every stream given this object as
    cancelled and shuts its socket, so a read blocked on a silent server returns at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()
        with self._lock:
            for sock in self._socks:
                _shut(sock)

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._socks.add(sock)
        if self._event.is_set():
            _shut(sock)

    def forget(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._socks.discard(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


REDACTED = "[redacted]"


def secrets_of(headers: dict | None) -> list[str]:
    """The values an Authorization (or API key) header carries: never to be written."""
    out = []
    for key, value in (headers or {}).items():
        if is_secret_name(key) and value:  # Authorization, X-API-Key, ... (harness/secrets.py)
            out.append(str(value))
            scheme, _, token = str(value).partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                out.append(token)
    return sorted((s for s in out if len(s) >= 4), key=len, reverse=True)


def redact(value, secrets: Iterable[str]):
    """value with every secret replaced, through strings, lists, dicts and records."""
    secrets = list(secrets)
    if not secrets:
        return value
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, REDACTED)
        return value
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    if isinstance(value, dict):
        return {redact(k, secrets): redact(v, secrets) for k, v in value.items()}
    if isinstance(value, StreamRecord):
        changes = {
            f.name: redact(getattr(value, f.name), secrets)
            for f in dataclasses.fields(value)
            if isinstance(getattr(value, f.name), (str, list, dict))
        }
        return dataclasses.replace(value, **changes)
    return value


def chat_payload(
    model: str | None, prompt: str, max_tokens: int | None, ignore_eos: bool = False, **extra
) -> dict:
    payload: dict = {
        "messages": [{"role": "user", "content": prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if model:
        payload["model"] = model
    if max_tokens is not None:
        payload["max_tokens"] = max_tokens
    if ignore_eos:
        payload["ignore_eos"] = True
    payload.update(extra)
    return payload


def stream_request(
    client: StreamClient,
    url: str,
    payload: dict,
    thresholds: Thresholds,
    *,
    request_id: str | None = None,
    headers: dict | None = None,
    on_record: Callable[[StreamRecord], None] | None = None,
    on_headers: Callable[[], None] | None = None,
    on_start: Callable[[StreamObserver], None] | None = None,
    keep_text: bool = False,
    cancel: Cancel | None = None,
) -> StreamRecord:
    """POST payload to url and read the event stream to its end (keep_text: with the
    answer's content pieces in record.pieces; on_start: given the stream's observer
    before it is sent, for a live view of its progress; cancel: ends it from elsewhere)."""
    request_id = request_id or new_request_id()
    hdrs = {
        "X-Request-Id": request_id,
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
    }
    hdrs.update(headers or {})
    secrets = secrets_of(client.headers) + secrets_of(headers)
    sent_at = time.time()
    t0 = time.monotonic()
    obs = StreamObserver(request_id, sent_at, thresholds, keep_text=keep_text)
    if on_start is not None:
        on_start(obs)
    record: StreamRecord | None = None
    try:
        record = _exchange(client, url, payload, hdrs, obs, t0, thresholds, on_headers, cancel)
    except BaseException:
        record = obs.finish(End.CANCELLED, time.monotonic() - t0, "cancelled by the harness")
        raise
    finally:
        if record is not None:
            record = redact(record, secrets)
        if on_record is not None and record is not None:
            on_record(record)
    return record


def _exchange(client, url, payload, hdrs, obs, t0, thresholds, on_headers, cancel) -> StreamRecord:
    def now() -> float:
        return time.monotonic() - t0

    socks: list = []

    def watch(sock: socket.socket) -> None:
        # the socket is known from its connect on: a cancel shuts it while the request
        # waits for headers too (a server that accepts and never answers)
        socks.append(sock)
        cancel.watch(sock)

    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    hdrs = {**hdrs, "Content-Type": "application/json"}
    try:
        if cancel is not None and cancel.is_set():
            return obs.finish(End.CANCELLED, now(), "cancelled by the harness before it was sent")
        with client.stream(url, body, hdrs, watch if cancel is not None else None) as response:
            obs.headers(response.status_code, response.headers.get("content-type"), now())
            obs.upstream = response.headers.get(UPSTREAM_HEADER)
            if on_headers is not None:
                on_headers()
            decode = _decoder(response.headers.get("content-encoding"), obs)
            if decode is None:  # an encoding it cannot read: not_sse, the encoding named
                obs.invalid = (
                    f"the body came in Content-Encoding {obs.content_encoding} although "
                    "identity was asked for (a compressing proxy?); rollcheck decodes gzip "
                    "and deflate only"
                )
                return obs.finish(End.EOF, now())
            arrival = client.on_arrival if isinstance(response, http1.Response) else None
            for raw in response.iter_raw():
                if arrival is not None and response.arrived_at is not None:
                    # the wait from the socket to the time stamp below
                    arrival(max(0.0, time.time() - response.arrived_at))
                try:
                    chunk = decode(raw)
                except zlib.error as exc:
                    obs.invalid = (
                        f"the body (Content-Encoding {obs.content_encoding}, though identity "
                        f"was asked for) could not be read: {exc}"
                    )
                    return obs.finish(End.EOF, now())
                obs.chunk(chunk, now())
                if cancel is not None and cancel.is_set():
                    return obs.finish(End.CANCELLED, now(), "cancelled by the harness")
                if obs.overflowed:
                    return obs.finish(End.EOF, now())  # judged: the rest is not read
                if obs.since_data_s(now()) > thresholds.stall_timeout_s:
                    # Only comments for too long: a keep-alive is not progress.
                    return obs.finish(End.STALL, now(), "only keep-alive comments")
            length = response.headers.get("content-length")
        if cancel is not None and cancel.is_set():  # its shut socket read as the body's end
            return obs.finish(End.CANCELLED, now(), "cancelled by the harness")
        record = obs.finish(End.EOF, now())
        if length is not None and record.outcome != "complete" and obs.status == 200:
            record.error = record.error or (
                f"the body ended at its Content-Length ({length[:20]} bytes); "
                "the connection was closed after it"
            )
        return record
    except Exception as exc:
        if cancel is not None and cancel.is_set():
            return obs.finish(End.CANCELLED, now(), "cancelled by the harness")
        return _failure(obs, now(), exc)
    finally:
        for sock in socks:
            cancel.forget(sock)


DECODE_STEP = 1 << 16  # bytes inflated at a time, so a bomb is stopped at the bound below


def _decoder(encoding: str | None, obs: StreamObserver):
    """A function from the bytes as they arrive to the bytes as sent before encoding;
    identity for none; None for an encoding rollcheck cannot decode. The record notes
    any encoding but identity."""
    name = (encoding or "").strip().lower()
    if name in ("", "identity"):
        return lambda raw: raw
    obs.content_encoding = name
    if name not in ("gzip", "x-gzip", "deflate"):
        return None
    # gzip; deflate is zlib-wrapped by the standard, raw by some servers: both are read
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in name else 32 + zlib.MAX_WBITS)
    raw_deflate = False

    def decode(raw: bytes) -> bytes:
        nonlocal inflater, raw_deflate
        try:
            out = inflater.decompress(raw, DECODE_STEP)
        except zlib.error:
            if name != "deflate" or raw_deflate or obs.bytes:
                raise
            raw_deflate = True
            inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            out = inflater.decompress(raw, DECODE_STEP)
        parts, size = [out], len(out)
        while inflater.unconsumed_tail:
            piece = inflater.decompress(inflater.unconsumed_tail, DECODE_STEP)
            parts.append(piece)
            size += len(piece)
            if size > MAX_DECODED_CHUNK:  # a compression bomb: memory stays bounded
                raise zlib.error(
                    f"one chunk inflates beyond {MAX_DECODED_CHUNK >> 20} MiB (a compression "
                    "bomb); not read further"
                )
        return b"".join(parts)

    return decode


MAX_DECODED_CHUNK = 8 << 20  # one network chunk never yields more than this once decoded


def _socket_of_stream(stream) -> socket.socket | None:
    try:
        return stream.get_extra_info("socket") if stream is not None else None
    except Exception:
        return None


# the same failures as harness.http1 and httpx name them
_CONNECT_FAILURES = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.UnsupportedProtocol,
    http1.ConnectError,
    http1.ConnectTimeout,
    http1.UnsupportedProtocol,
)
_TIMEOUTS = (
    httpx.ReadTimeout,
    httpx.PoolTimeout,
    httpx.WriteTimeout,
    http1.ReadTimeout,
    http1.PoolTimeout,
    http1.WriteTimeout,
)


def _failure(obs: StreamObserver, t: float, exc: Exception) -> StreamRecord:
    """The record of an exchange that raised."""
    if isinstance(exc, _CONNECT_FAILURES):
        return obs.finish(End.CONNECT, t, _describe(exc))
    if isinstance(exc, _TIMEOUTS):
        return obs.finish(End.STALL, t, _describe(exc))
    end = End.CONNECT if obs.status is None else End.RESET
    if isinstance(exc, (httpx.HTTPError, http1.HttpFailure, OSError)):  # a protocol error too
        return obs.finish(end, t, _describe(exc))
    # a bug in the harness must still leave a record
    return obs.finish(end, t, f"client error: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
